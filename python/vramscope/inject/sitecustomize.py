"""vramscope's capture bootstrap, injected by ``vramscope run`` (docs/design/capture.md).

``vramscope run`` writes this file as ``sitecustomize.py`` into a temporary folder first on
PYTHONPATH, with the package ``vramscope/`` beside it (the bootstrap is ``vramscope/bootstrap/``).
It starts the bootstrap (which does nothing unless VRAMSCOPE_CAPTURE_DIR is set), then runs the
``sitecustomize`` this file shadows (a distribution's or a virtual environment's), as Python would
have.
"""


def _vramscope_start():
    import sys

    try:
        import vramscope.bootstrap

        vramscope.bootstrap.install()
    except BaseException as e:  # noqa: BLE001 - never stop the user's program from starting
        try:
            sys.stderr.write(f"vramscope: could not load the capture bootstrap ({type(e).__name__}: "
                             f"{e}); the program runs without capture\n")
        except Exception:
            pass


def _vramscope_chain():
    """Runs the next ``sitecustomize`` on sys.path, the one this file took the place of."""
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from importlib.machinery import PathFinder
        from importlib.util import module_from_spec

        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        module = module_from_spec(spec)
        spec.loader.exec_module(module)
        globals()["vramscope_chained"] = module
    except Exception as e:  # what site.py does with a failing sitecustomize
        try:
            sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                             f"{type(e).__name__}: {e}\n")
        except Exception:
            pass


_vramscope_start()
_vramscope_chain()
del _vramscope_start, _vramscope_chain
