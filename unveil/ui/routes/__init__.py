"""The web app's pages, one router per page kind: `review` (the CTD review queue and its decisions), `detections`
(TAG detection results) and `ipr` (IPR results), each named by its kind's entry in `unveil.ui.kinds.KINDS`; and the
pages of every kind: `images` (the start page and stored images), `calls` and `compare`. `unveil.ui.app` includes
them all; a page of another kind than the opened path answers 404."""
