"""attnviz: see attention. A Qt desktop app over a traced, pure-PyTorch attention engine."""

__version__ = "0.1.0"
