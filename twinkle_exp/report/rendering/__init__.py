"""Rendering: the report's plots, its rows and sentences, and the Markdown, HTML and terminal views of them."""
