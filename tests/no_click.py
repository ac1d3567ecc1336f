"""Python source that makes ``click`` unimportable in a child interpreter.

The README's install has no ``click`` (typer vendors its own); the test environment does,
through other test dependencies. Tests that run roofprof as a user would prefix their
``python -c`` program with :data:`BLOCK_CLICK` (it needs ``import sys`` before it).
"""

BLOCK_CLICK = """
class _NoClick:
    def find_spec(self, name, path=None, target=None):
        if name == "click" or name.startswith("click."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoClick())
for _name in [m for m in sys.modules if m == "click" or m.startswith("click.")]:
    del sys.modules[_name]
"""
