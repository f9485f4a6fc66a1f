"""Python client for npud.

- `from npud import acl`: the pyACL surface over npud (same calls, return conventions
  and aclError codes).
- `npud.core`: a cuda.core-like Device/Stream/Event API.
"""

from npud.errors import NpudError

__all__ = ["NpudError"]
__version__ = "0.1.0"
