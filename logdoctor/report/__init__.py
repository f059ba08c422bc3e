"""Stage 5, reporting: a `Report` in, text / JSON / Markdown out (one diagnosis model for every format).
"""
