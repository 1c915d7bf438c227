"""Loading and validating a contract YAML: regions x cases -> implementation + constants.

Schema: `name`; `regions: {<region>: {<case>: {impl: <family>.<variant>, constants: {<name>:
<exact value>}}}}`, every region listing all five cases (YAML anchors keep that short);
`claims: {<claim kind>: [<region>, ...] | all | [<int>, ...]}`; optional `layout: {tp_reduce,
ep_combine, dp_reduce, num_leaves}` (kernels/layout/policy.py).
"""
import functools
from dataclasses import dataclass, field
from pathlib import Path

from kernels.contract.constants import decode_constant
from kernels.contract.regions import CASES, CLAIM_KINDS, PAIRED_REGIONS, REGION_FAMILY
from kernels.layout.policy import LayoutPolicy, policy_from_mapping
from kernels.ops import registry
from kernels.strict_yaml import load_yaml

CONTRACT_DIR = Path(__file__).parent


class ContractError(ValueError):
    """A contract that cannot be used, with the file and the offending entry named."""


@dataclass(frozen=True, slots=True)
class Binding:
    """One region x case: the implementation and its pinned constants."""

    region: str
    """Region name, e.g. "qkv_proj"."""
    case: str
    """One of CASES."""
    impl: str
    """"<family>.<variant>" in kernels.ops.registry."""
    constants: tuple
    """Sorted (name, value) pairs of pinned constants."""

    def function(self):
        """The implementation with its pinned constants applied."""
        return functools.partial(registry.implementation(self.impl), **dict(self.constants))


@dataclass(frozen=True)
class Contract:
    """A loaded contract: look up the callable for a region in a case with `op`."""

    name: str
    """The contract's own name (fast, consistent, ...)."""
    bindings: dict
    """(region, case) -> Binding."""
    claims: dict = field(default_factory=dict)
    """claim kind -> tuple of regions or ints."""
    source: str = ""
    """Where it was loaded from."""
    layout: LayoutPolicy | None = None
    """How ranks combine partials under a parallel layout; None: single process only."""

    @property
    def regions(self) -> tuple:
        return tuple(sorted({region for region, _ in self.bindings}))

    def binding(self, region: str, case: str) -> Binding:
        if (region, case) not in self.bindings:
            raise ContractError(f"contract {self.name!r} has no entry for {region} x {case}")
        return self.bindings[(region, case)]

    def op(self, region: str, case: str):
        """The callable for one region in one case."""
        return _bound_function(self.binding(region, case))

    def with_regions_from(self, other: "Contract", regions) -> "Contract":
        """This contract with every case of `regions` taken from `other` (e.g. one region of
        the consistent contract swapped to the fast one, to show that region matters)."""
        regions = set(regions)
        for pair in PAIRED_REGIONS:
            if regions & set(pair):
                regions |= set(pair)
        bindings = {key: (other.binding(*key) if key[0] in regions else binding)
                    for key, binding in self.bindings.items()}
        return Contract(name=f"{self.name}+{other.name}:{','.join(sorted(regions))}",
                        bindings=bindings, claims={}, source=self.source, layout=self.layout)

    def require_regions(self, regions) -> None:
        """Fail clearly if a model needs regions this contract does not map."""
        missing = sorted(set(regions) - set(self.regions))
        if missing:
            raise ContractError(f"contract {self.name!r} lacks regions {missing}")


@functools.lru_cache(maxsize=None)
def _bound_function(binding: Binding):
    return binding.function()


def load_contract(name_or_path) -> Contract:
    """A shipped contract by name ("fast", "consistent") or a YAML file by path."""
    path = Path(name_or_path)
    if path.is_dir():
        raise ContractError(f"{path}: is a directory; name a contract YAML file or a shipped contract")
    if not path.suffix:
        path = CONTRACT_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            shipped = sorted(p.stem for p in CONTRACT_DIR.glob("*.yaml"))
            raise ContractError(f"unknown contract {name_or_path!r}; shipped: {shipped}")
    try:
        document = load_yaml(path, "contract")
    except ValueError as error:
        raise ContractError(str(error)) from error  # it names the file already
    try:
        return _parse(document, str(path))
    except ValueError as error:
        raise ContractError(f"{path}: {error}") from error


def _parse(document, source: str) -> Contract:
    if not isinstance(document, dict) or "name" not in document or "regions" not in document:
        raise ValueError("a contract is a mapping with 'name' and 'regions'")
    unknown_keys = set(document) - {"name", "regions", "claims", "layout"}
    if unknown_keys:
        raise ValueError(f"unknown top-level keys {sorted(unknown_keys)}")
    if not isinstance(document["name"], str) or not document["name"]:
        raise ValueError("name: must be a non-empty string")
    if not isinstance(document["regions"], dict) or not document["regions"]:
        raise ValueError("regions: must be a non-empty mapping of region -> cases")
    bindings = {}
    for region, cases in document["regions"].items():
        if region not in REGION_FAMILY:
            raise ValueError(f"unknown region {region!r}; known: {sorted(REGION_FAMILY)}")
        if not isinstance(cases, dict):
            raise ValueError(f"region {region!r}: expected a mapping of cases")
        missing = [case for case in CASES if case not in cases]
        extra = sorted(set(cases) - set(CASES))
        if missing or extra:
            raise ValueError(f"region {region!r}: missing cases {missing}, unknown cases {extra}")
        for case in CASES:
            bindings[(region, case)] = _parse_binding(region, case, cases[case])
    _check_pairs(bindings)
    claims = _parse_claims(document.get("claims") or {}, set(REGION_FAMILY))
    layout = policy_from_mapping(document["layout"]) if "layout" in document else None
    return Contract(name=str(document["name"]), bindings=bindings, claims=claims, source=source,
                    layout=layout)


def _check_pairs(bindings) -> None:
    """Paired regions (regions.PAIRED_REGIONS) are both fast or both not, in every case."""
    for first, second in PAIRED_REGIONS:
        for case in CASES:
            a, b = bindings.get((first, case)), bindings.get((second, case))
            if a and b and _is_fast(a) != _is_fast(b):
                raise ValueError(f"{first} and {second} must switch together: {case} has "
                                 f"{a.impl} with {b.impl}")


def _is_fast(binding: Binding) -> bool:
    return binding.impl.partition(".")[2].startswith("fast")


def _parse_binding(region: str, case: str, entry) -> Binding:
    where = f"{region} x {case}"
    if not isinstance(entry, dict) or "impl" not in entry:
        raise ValueError(f"{where}: expected {{impl: ..., constants: ...}}")
    if set(entry) - {"impl", "constants"}:
        raise ValueError(f"{where}: unknown keys {sorted(set(entry) - {'impl', 'constants'})}")
    impl = str(entry["impl"])
    registry.implementation(impl)
    if impl.partition(".")[0] != REGION_FAMILY[region]:
        raise ValueError(f"{where}: {impl} is not a {REGION_FAMILY[region]} implementation")
    raw = entry.get("constants") or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: constants must be a mapping")
    types = registry.constant_types(impl)
    required = {name for name, (_, has_default) in types.items() if not has_default}
    if set(raw) - set(types) or required - set(raw):
        raise ValueError(f"{where}: {impl} takes constants {sorted(required)} "
                         f"(optional {sorted(set(types) - required)}), got {sorted(raw)}")
    constants = tuple(sorted((name, _typed_constant(where, name, value, types[name][0]))
                             for name, value in raw.items()))
    return Binding(region=region, case=case, impl=impl, constants=constants)


def _typed_constant(where, name, raw, expected):
    """Decode an exact constant and check it against the implementation's annotation; the
    integer constants are counts and sizes, so they must be positive."""
    if expected is int and isinstance(raw, float) and raw.is_integer() and raw > 0:
        raise ValueError(f"{where}: constant {name!r} is an integer; write {int(raw)}, not {raw!r}")
    value = decode_constant(name, raw)
    if expected is int and (type(value) is not int or value <= 0):
        raise ValueError(f"{where}: constant {name!r} must be a positive integer, got {raw!r}")
    if expected in (bool, str, float) and type(value) is not expected:
        raise ValueError(f"{where}: constant {name!r} must be a {expected.__name__}, got {raw!r}")
    return value


def _parse_claims(raw, known_regions) -> dict:
    if not isinstance(raw, dict):
        raise ValueError("claims must be a mapping")
    claims = {}
    for kind, value in raw.items():
        if kind not in CLAIM_KINDS:
            raise ValueError(f"unknown claim {kind!r}; known: {sorted(CLAIM_KINDS)}")
        if kind == "tp_sizes":
            if not isinstance(value, list) or not all(type(v) is int and v > 0 for v in value):
                raise ValueError(f"claim {kind!r}: expected a list of positive integers")
        else:
            value = sorted(known_regions) if value == "all" else value
            if not isinstance(value, list) or set(value) - known_regions:
                raise ValueError(f"claim {kind!r}: expected 'all' or a list of known regions, "
                                 f"got {value!r}")
        claims[kind] = tuple(value)
    return claims
