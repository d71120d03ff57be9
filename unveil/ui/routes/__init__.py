"""The web app's pages, one router per page kind: `review` (the CTD review queue and its decisions), `detections`
(TAG detection results), `ipr` (IPR results) and `images` (the start page and stored images). `unveil.ui.app`
includes them all; a page of another kind than the opened file answers 404."""
