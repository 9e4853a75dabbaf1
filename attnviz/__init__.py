"""attnviz: see attention. A Qt desktop app over a traced, pure-PyTorch attention engine."""

__version__ = "0.1.0"

# The model-backed variants join core's registry here, after the seed variants and in this order (the
# Variant box's): core itself imports neither package.
from .models import variant as _pretrained  # noqa: E402, F401
from .toys import variant as _toys  # noqa: E402, F401
