"""Evaluation of Unveil against the papers' protocols: metrics, dataset loaders, detection and IPR runners, reports."""
