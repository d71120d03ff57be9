"""What the web app shows, read from disk: one module per page kind (`ctd`, `detection`, `ipr`)."""

from unveil.ui.sources.ctd import *  # noqa: F403
from unveil.ui.sources.ctd import __all__ as __all__
