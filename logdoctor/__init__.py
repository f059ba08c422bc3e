"""logdoctor: read SGLang server logs and say why a launch failed."""
__version__ = "0.1.0"
