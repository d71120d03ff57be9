"""What the web app shows, read from disk: one module per page kind (`ctd`: a dataset folder, `detection`: TAG
detection results, `ipr`: IPR results) and what they share (`common`: the image store check, the source shape).
The kinds themselves are registered in `unveil.ui.kinds`."""

from unveil.ui.sources.common import ImageIndex as ImageIndex
from unveil.ui.sources.common import OpenOptions as OpenOptions
from unveil.ui.sources.common import PageSource as PageSource
from unveil.ui.sources.ctd import CtdSource as CtdSource
from unveil.ui.sources.detection import DetectionSource as DetectionSource
from unveil.ui.sources.ipr import IprSource as IprSource

__all__ = ["CtdSource", "DetectionSource", "ImageIndex", "IprSource", "OpenOptions", "PageSource"]
