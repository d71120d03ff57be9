"""Roles of the CTD generation pipeline: Architect, Eraser, the judges and the Gatekeeper's feedback writer."""
