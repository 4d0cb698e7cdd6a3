"""setuptools' build step, plus the catalogue and the bundled models, so an installed specviz runs offline as a checkout.

`models.yaml` and `assets/` live at the repository's root (the Space runs from a checkout, and everything else refers
to them there). A wheel carries a copy of both in `specviz/bundle/`, where specviz/models/catalogue.py looks first:
folders in models.yaml are relative to it, so `assets/pycode-target` resolves inside the copy. Left out of the copy:
the README's pictures, the training data (assets/training/) and weights unpacked beside their `.xz` (git ignores
them too). An editable install reads the checkout itself. Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
LEFT_OUT = ("*.png", "training", "*.npz", "model.safetensors", "feature_head.safetensors", "*.unpacked-from", "*.partial")


class BuildWithBundle(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        bundle = Path(self.build_lib) / "specviz" / "bundle"
        shutil.rmtree(bundle, ignore_errors=True)
        bundle.mkdir(parents=True)
        shutil.copy2(ROOT / "models.yaml", bundle / "models.yaml")
        shutil.copytree(ROOT / "assets", bundle / "assets", ignore=shutil.ignore_patterns(*LEFT_OUT))


setup(cmdclass={"build_py": BuildWithBundle})
