"""Serving: the HTTP app, request batching and the web page."""
