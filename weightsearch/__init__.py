"""weightsearch: find the loss weight a central task should get in multi-task NLU training."""

import os as _os
import sys as _sys

from weightsearch import _links

__version__ = "0.1.0"

_broken = _links.problems(_os.path.dirname(__file__))
if _broken:  # a checkout without symbolic links: say so here, not as a missing module later
    if _os.path.basename(_sys.argv[0] if _sys.argv else "") == "weightsearch":
        print(f"weightsearch: error: {_links.message(_broken)}", file=_sys.stderr)
        raise SystemExit(2)
    raise ImportError(_links.message(_broken))
