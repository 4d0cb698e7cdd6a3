"""The page is light by construction: importing the app loads neither torch nor transformers.

The README promises that the page serves before the models load; that holds only while every module
app.py imports stays free of torch and transformers. A fresh interpreter shows what `import app` really loads.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers")


def test_importing_the_app_loads_neither_torch_nor_transformers():
    code = f"import app, sys; print(' '.join(name for name in {HEAVY!r} if name in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"import app failed:\n{result.stderr[-2000:]}"
    loaded = result.stdout.split()
    assert not loaded, (
        f"`import app` loaded {', '.join(loaded)}: the page must serve before the models load, so every module "
        "app.py imports must stay light (find the culprit with `python -X importtime -c 'import app'`)"
    )


def test_the_app_takes_the_engine_limit_instead_of_copying_it():
    source = (ROOT / "app.py").read_text()
    assert "MAX_GAMMA =" not in source, "app.py must import MAX_GAMMA from specviz.engine.settings, not keep a copy"
