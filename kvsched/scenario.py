"""Loading scenario files: YAML in, validated variants out, or one clear error.

A scenario is a base configuration plus named variants that override parts of it; values
given on the command line (`--set dotted.path=value`) are applied last, to every variant.
Every error names the file, the field path and, where known, the YAML line.
"""

from __future__ import annotations

import copy
import difflib
import functools
import stat
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from kvsched.compat import first_conflict
from kvsched.config import ENGINE_DEFAULTS
from kvsched.errors import ScenarioError, excerpt
from kvsched.records.diagnosis import INCIDENT_KEYS
from kvsched.records.metric_names import VLLM_NAMES, refusal, resolve
from kvsched.records.metrics import CLASS_KEYS, CLUSTER_KEYS, OFFLOAD_KEYS, PD_KEYS, SUMMARY_KEYS
from kvsched.schema import (
    OVERRIDABLE,
    Expectation,
    InlineWorkload,
    RunSpec,
    ScenarioSpec,
    SyntheticWorkload,
    engine_values,
    replica_engines,
    written_engine_keys,
)

Path_ = tuple[str | int, ...]
SCENARIO_ONLY = ("name",)  # --set keys that belong to the file, not to each variant
MAX_FILE_BYTES = 64 * 2**20
MAX_DEPTH = 64  # nesting levels of mappings and lists
MAX_NODES = 2_000_000  # values in the document with every alias expanded


@dataclass(frozen=True)
class Assignment:
    """One `--set dotted.path=value` from the command line (or a sweep axis: `option`)."""

    path: tuple[str, ...]
    value: Any
    text: str
    option: str = "--set"

    @classmethod
    def parse(cls, text: str) -> Assignment:
        key, sep, raw = text.partition("=")
        if not sep or not key.strip():
            raise ScenarioError("--set", f"expected KEY=VALUE, got '{excerpt(text)}'")
        path = tuple(part.strip() for part in key.strip().split("."))
        if any(not part for part in path):
            raise ScenarioError("--set", f"malformed key '{key}' in '{text}'")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        return cls(path, value, text)


@dataclass(frozen=True)
class Variant:
    """One run of a scenario: its name, validated spec, and the resolved raw mapping."""

    name: str
    spec: RunSpec
    resolved: dict[str, Any]
    index: int | None  # position in `variants:`, None for the implicit `base`
    scenario: Scenario

    def error(self, field: Path_, message: str) -> ScenarioError:
        """An error about `field`, pointing where this variant got its value from."""
        return self.scenario.error_at(field, self.index, message)


@dataclass(frozen=True)
class Scenario:
    """A loaded scenario file: its validated spec, the raw mapping and the line of each key
    (for errors), the values given on the command line, and its resolved variants."""

    name: str
    description: str
    source: str  # the file as the user named it
    base_dir: Path  # paths in the workload resolve against it
    spec: ScenarioSpec
    raw: dict[str, Any]
    lines: dict[Path_, int]
    assignments: tuple[Assignment, ...]
    variants: tuple[Variant, ...] = ()

    @property
    def expectations(self) -> list[Expectation]:
        return list(self.spec.expect)

    def error_at(self, field: Path_, variant_index: int | None, message: str) -> ScenarioError:
        """Attribute `field` of a resolved variant to --set, the variant, or the base."""
        for assignment in self.assignments:
            n = min(len(assignment.path), len(field))
            if tuple(field[:n]) == assignment.path[:n]:
                where = _dotted(field) or ".".join(assignment.path)
                return ScenarioError(self.source, message, f"{assignment.option} {where}")
        if variant_index is not None:
            overrides = self.raw["variants"][variant_index]
            base = {key: _expand(key, self.raw[key]) for key in OVERRIDABLE if key in self.raw}
            if _from_override(_expand_all(overrides), base, field):
                full = ("variants", variant_index, *field)
                return ScenarioError(self.source, message, _dotted(full),
                                     _line_of(self.lines, full))
        return ScenarioError(self.source, message, _dotted(field), _line_of(self.lines, field))


# -- loading ----------------------------------------------------------------------------


def load_scenario(path: str | Path, assignments: Iterable[str | Assignment] = (),
                  seed: int | None = None) -> Scenario:
    """Read, validate and resolve every variant of a scenario file."""
    source = str(path)
    file = Path(path)
    try:
        info = file.stat()
    except FileNotFoundError:
        raise ScenarioError(source, "no such file") from None
    except OSError as exc:
        raise ScenarioError(source, f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        what = "a folder" if stat.S_ISDIR(info.st_mode) else (
            "not a regular file (a FIFO, a device...)")
        raise ScenarioError(source, f"cannot read: {what}; expected a YAML scenario file")
    if info.st_size > MAX_FILE_BYTES:
        raise ScenarioError(source, f"{info.st_size:,} bytes; a scenario file may have at most "
                                    f"{MAX_FILE_BYTES:,} (put requests in a trace file)")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.reason if isinstance(exc, UnicodeDecodeError) else (exc.strerror or exc)
        raise ScenarioError(source, f"cannot read: {reason}") from None
    return load_scenario_text(text, source, file.parent, assignments, seed)


def _read_yaml(text: str, source: str) -> tuple[dict[Path_, int] | DuplicateKey, Any]:
    """The line of every key (or the first key given twice) and the document's data, after
    `_check_shape`: two passes of PyYAML's parser where `yaml.compose` and then
    `yaml.safe_load` made three. The lines are read before the data is made from the same
    nodes (making it flattens `<<` merge keys into their mappings).
    (libyaml, ten times faster, accepts what PyYAML refuses: tabs as spacing, a `?` inside a
    flow scalar; and reads a bare `!` tag as '' rather than null.)"""
    _check_shape(text, source)
    loader = yaml.SafeLoader(text)
    try:  # yaml.safe_load, keeping the node it composes
        node = loader.get_single_node()
        try:
            lines: dict[Path_, int] | DuplicateKey = _line_map(node)
        except DuplicateKey as dup:  # (reported after the YAML errors, as before)
            lines = dup
        except TypeError:  # a list or a mapping as a key: making the data refuses it below
            lines = {}
        return lines, (loader.construct_document(node) if node is not None else None)
    finally:
        loader.dispose()


def _check_shape(text: str, source: str) -> None:
    """Refuse documents too deep or too big once aliases are expanded (a 'billion laughs'
    file), reading the event stream, which costs one pass and no recursion."""
    sizes: dict[str, int] = {}  # anchor -> expanded node count
    stack: list[list[Any]] = []  # open collections: [anchor, node count so far]
    expanded = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            stack.append([event.anchor, 1])
            if len(stack) > MAX_DEPTH:
                raise ScenarioError(source, f"nested deeper than {MAX_DEPTH} levels; refused",
                                    line=_line(event))
            expanded += 1
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, count = stack.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, count = event.anchor, 1
            expanded += 1
        elif isinstance(event, yaml.AliasEvent):
            anchor, count = None, sizes.get(event.anchor or "", 1)
            expanded += count
        else:
            continue
        if anchor is not None:
            sizes[anchor] = count
        if stack:
            stack[-1][1] += count
        if expanded > MAX_NODES:
            raise ScenarioError(source, f"the document expands to over {MAX_NODES:,} values "
                                        "with its aliases; refused", line=_line(event))


def _line(event: yaml.Event) -> int | None:
    return event.start_mark.line + 1 if event.start_mark is not None else None


@functools.lru_cache(maxsize=4)
def _read_yaml_kept(text: str, source: str) -> tuple[dict[Path_, int] | DuplicateKey, Any]:
    """`_read_yaml` of the last few texts: a sweep or a capacity search loads its scenario
    once per grid point (twice: checked, then run), and parsing it each time cost 30 ms a
    point (a text that fails is not kept: it is read, and refused, every time)."""
    return _read_yaml(text, source)


def _read_yaml_once(text: str, source: str) -> tuple[dict[Path_, int] | DuplicateKey, Any]:
    """`_read_yaml_kept`, copied: no load sees what another changed."""
    lines, raw = _read_yaml_kept(text, source)
    return (dict(lines) if isinstance(lines, dict) else lines), copy.deepcopy(raw)


def load_scenario_text(text: str, source: str, base_dir: Path,
                       assignments: Iterable[str | Assignment] = (),
                       seed: int | None = None) -> Scenario:
    try:
        lines, raw = _read_yaml_once(text, source)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise ScenarioError(source, f"YAML syntax error: {problem}", line=line) from None
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid YAML"
        raise ScenarioError(source, f"YAML syntax error: {excerpt(first, 120)}") from None
    if not isinstance(raw, dict):
        kind = "an empty file" if raw is None else _kind(raw)
        raise ScenarioError(source, f"expected a mapping of scenario fields, got {kind}", line=1)
    if isinstance(lines, DuplicateKey):
        raise ScenarioError(source, "duplicate key (given twice)", lines.field, lines.line)
    sets = tuple(a if isinstance(a, Assignment) else Assignment.parse(a) for a in assignments)
    if seed is not None:
        sets += (Assignment(("seed",), seed, f"seed={seed}", "--seed"),)
    for assignment in sets:
        if assignment.path[0] in SCENARIO_ONLY:  # --set name=...: picks the results folder
            raw = {**raw, assignment.path[0]: assignment.value}
    try:
        spec = ScenarioSpec.model_validate(raw)
    except ValidationError as exc:
        loc, message = _first_error(exc, ScenarioSpec)
        raise ScenarioError(source, message, _dotted(loc), _line_of(lines, loc)) from None
    scenario = Scenario(spec.name, spec.description, source, base_dir, spec, raw, lines, sets)
    variants = _resolve_variants(scenario)
    object.__setattr__(scenario, "variants", variants)
    _check_expectations(scenario)
    return scenario


def _resolve_variants(scenario: Scenario) -> tuple[Variant, ...]:
    raw = scenario.raw
    base = {key: _expand(key, raw[key]) for key in OVERRIDABLE if key in raw}
    variants_raw = raw.get("variants") or []
    named: list[tuple[str, int | None, dict[str, Any]]] = []
    seen: set[str] = set()
    for index, override in enumerate(variants_raw):
        name = override["name"]
        if name in seen:
            raise scenario.error_at(("name",), index, f"duplicate variant name '{name}'")
        seen.add(name)
        extra = sorted(set(override) - {"name", *OVERRIDABLE})
        if extra:
            raise scenario.error_at((extra[0],), index, unknown_key(extra[0], OVERRIDABLE))
        body = {key: _expand(key, value) for key, value in override.items() if key != "name"}
        named.append((name, index, body))
    if not named:
        named.append(("base", None, {}))

    variants = []
    for name, position, body in named:
        resolved = _merge(base, body)
        for assignment in scenario.assignments:
            if assignment.path[0] not in SCENARIO_ONLY:
                resolved = _assign(resolved, assignment)
        try:
            spec = RunSpec.model_validate(resolved)
        except ValidationError as exc:
            loc, message = _first_error(exc, RunSpec)
            raise scenario.error_at(loc, position, message) from None
        _check_engines(scenario, spec, resolved, name, position)
        variants.append(Variant(name, spec, resolved, position, scenario))
    return tuple(variants)


def _check_engines(scenario: Scenario, spec: RunSpec, resolved: dict[str, Any], name: str,
                   position: int | None) -> None:
    """Refuse an engine (the variant's, or a replica's with its override) whose keys no
    engine family honours together (`kvsched.compat.RULES`), blaming a key the user wrote."""
    written = written_engine_keys(resolved.get("engine"))
    where = f" (variant '{name}')" if position is not None else ""
    conflict = first_conflict(engine_values(spec.engine), written,
                              origin=f"preset {spec.engine.preset}", defaults=ENGINE_DEFAULTS)
    if conflict is not None:
        key = written.get(conflict.key, conflict.key)
        raise scenario.error_at(("engine", key), position, conflict.message + where)
    if spec.cluster is None:
        return
    entries = (resolved.get("cluster") or {}).get("replicas")
    for i, engine in enumerate(replica_engines(spec)):
        raw = entries[i] if isinstance(entries, list) and isinstance(entries[i], dict) else {}
        given = written_engine_keys(raw.get("engine"))
        if not given:
            continue  # the variant's engine, checked above
        conflict = first_conflict(engine_values(engine), {**written, **given},
                                  origin=f"preset {engine.preset}", prefer=given,
                                  defaults=ENGINE_DEFAULTS)
        if conflict is None:
            continue
        field: Path_ = ("cluster", "replicas", i, "engine")
        message = conflict.message
        if conflict.key in given:
            field += (given[conflict.key],)
        else:  # the override's preset made the variant's keys conflict
            field += ("preset",) if "preset" in given else ()
            message = f"{conflict.key} {message}"
        raise scenario.error_at(field, position, message + where)


def _check_expectations(scenario: Scenario) -> None:
    names = [v.name for v in scenario.variants]
    for variant in scenario.variants:
        baseline = variant.spec.diagnosis.baseline
        if baseline is not None and baseline not in names:
            raise variant.error(("diagnosis", "baseline"),
                                unknown_value("variant", baseline, names))
    for i, expectation in enumerate(scenario.spec.expect):
        for key in ("variant", "ratio_to"):
            value = getattr(expectation, key)
            if value is not None and value not in names:
                raise scenario.error_at(("expect", i, key), None,
                                        unknown_value("variant", value, names))
        classes = known_classes(scenario)
        compared = {expectation.variant, expectation.ratio_to}
        units = {time_unit_of(v.spec) for v in scenario.variants if v.name in compared}
        for key in ("metric", "per"):
            metric = getattr(expectation, key)
            if metric is None:
                continue
            problem = refusal(metric, units)
            if problem is None and not is_known_metric(resolve(metric)[0], classes):
                expected = [*SUMMARY_KEYS, *INCIDENT_KEYS, *CLUSTER_KEYS, *PD_KEYS,
                            *OFFLOAD_KEYS,
                            *(f"{k}_{c}" for c in sorted(classes or ()) for k in CLASS_KEYS),
                            *VLLM_NAMES]
                problem = unknown_value("metric", metric, expected)
            if problem is not None:
                raise scenario.error_at(("expect", i, key), None, problem)


def time_unit_of(spec: RunSpec) -> str:
    """The unit a variant's times will be in (`RunResult.time_unit`), known before it runs:
    a cluster's is its first replica's (the replicas must agree, checked as it runs)."""
    time = spec.time
    if spec.cluster is not None and spec.cluster.replicas[0].time is not None:
        time = spec.cluster.replicas[0].time
    return "steps" if time.kind == "steps" else "s"


def known_classes(scenario: Scenario) -> set[str] | None:
    """The request classes the variants' workloads can produce, or None if a trace decides."""
    classes: set[str] = set()
    for variant in scenario.variants:
        workload = variant.spec.workload
        if isinstance(workload, InlineWorkload):
            classes |= {r.class_ for r in workload.requests if r.class_ is not None}
        elif isinstance(workload, SyntheticWorkload):
            classes |= {c.name for c in workload.mix or ()}
        else:
            return None
    return classes


def is_known_metric(metric: str, classes: set[str] | None = None) -> bool:
    """A summary key, or a per-class key such as `ttft_p99_long` (of a class in `classes`,
    when the classes are known)."""
    if metric in SUMMARY_KEYS or metric in INCIDENT_KEYS or metric in CLUSTER_KEYS \
            or metric in PD_KEYS or metric in OFFLOAD_KEYS:
        return True
    return any(metric.startswith(f"{key}_") and len(metric) > len(key) + 1
               and (classes is None or metric[len(key) + 1:] in classes)
               for key in CLASS_KEYS)


# -- merging and assignment -------------------------------------------------------------


def _expand(key: str, value: Any) -> Any:
    """Shorthand to full form where merging needs it (`policy: spf` -> `{name: spf}`)."""
    if key == "policy" and isinstance(value, str):
        return {"name": value}
    return value


def _merge(base: Any, override: Any) -> Any:
    """Deep merge; a mapping of another `kind` (or another policy `name`) replaces instead."""
    if _replaces(override, base):
        return copy.deepcopy(override)
    merged = copy.deepcopy(base)
    for key, value in override.items():
        merged[key] = _merge(base[key], value) if key in base else copy.deepcopy(value)
    return merged


def _assign(resolved: dict[str, Any], assignment: Assignment) -> dict[str, Any]:
    out = copy.deepcopy(resolved)
    target: Any = out
    *parents, last = assignment.path
    for i, key in enumerate(parents):
        child = target.get(key)
        if isinstance(child, str) and key == "policy":
            child = {"name": child}
        if child is None:
            child = {}
        if not isinstance(child, dict):
            raise ScenarioError("--set", f"'{'.'.join(assignment.path[:i + 1])}' is "
                                f"{_kind(child)}, not a mapping", assignment.text)
        target[key] = child
        target = child
    target[last] = _expand(last, assignment.value) if not parents else assignment.value
    return out


def _expand_all(mapping: dict[str, Any]) -> dict[str, Any]:
    return {key: _expand(key, value) for key, value in mapping.items()}


def _from_override(override: Any, base: Any, field: Path_) -> bool:
    """Whether a variant's resolved `field` comes from its override rather than the base."""
    for key in field:
        in_override = _contains(override, key)
        in_base = base is not None and _contains(base, key)
        if in_override != in_base:
            return in_override
        if not in_override:  # missing in both: blame whoever wrote the enclosing mapping
            return override is not None and base is None
        override, base = override[key], base[key]
        if _replaces(override, base):
            base = None
    return True


def _replaces(override: Any, base: Any) -> bool:
    """Whether merging `override` over `base` replaces it (see `_merge`)."""
    if not (isinstance(override, dict) and isinstance(base, dict)):
        return True
    return any(tag in override and tag in base and override[tag] != base[tag]
               for tag in ("kind", "name"))


def _contains(container: Any, key: str | int) -> bool:
    if isinstance(container, dict):
        return key in container
    return isinstance(container, list) and isinstance(key, int) and key < len(container)


# -- error messages ---------------------------------------------------------------------


def _first_error(exc: ValidationError, root: type[BaseModel]) -> tuple[Path_, str]:
    errors = exc.errors(include_url=False)
    # An unknown key usually explains a "missing" one next to it: name it first.
    error = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc, parent = _clean_loc(root, error["loc"])
    message = _message(error, loc, parent)
    if len(errors) > 1:
        message += f" (+{len(errors) - 1} more)"
    return loc, message


def _message(error: Mapping[str, Any], loc: Path_, parent: Any) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    got = _kind(value)
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        allowed = _fields_of(parent)
        return unknown_key(str(loc[-1]), allowed)
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"expected an integer, got {got}"
    if kind in ("float_type", "float_parsing"):
        return f"expected a number, got {got}"
    if kind in ("bool_type", "bool_parsing"):
        return f"expected true or false, got {got}"
    if kind == "string_type":
        return f"expected a string, got {got}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"expected a mapping, got {got}"
    if kind == "list_type":
        return f"expected a list, got {got}"
    bounds = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<",
              "less_than_equal": "<="}
    if kind in bounds:
        limit = next(iter(ctx.values()))
        return f"expected a value {bounds[kind]} {_number(limit)}, got {got}"
    if kind == "literal_error":
        options = [o.strip(" '") for o in str(ctx.get("expected", "")).replace(" or ", ",")
                   .split(",") if o.strip(" '")]
        return unknown_value("value", value, options)
    if kind == "union_tag_invalid":
        options = [o.strip(" '") for o in str(ctx.get("expected_tags", "")).split(",")]
        return unknown_value("kind", ctx.get("tag"), options)
    if kind == "union_tag_not_found":
        return "missing 'kind'"
    if kind == "too_short":
        return f"expected at least {ctx.get('min_length', 1)} item(s), got none"
    if kind == "string_pattern_mismatch":
        return f"expected letters, digits, '_', '-' or '.', got {got}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return str(error["msg"])


def unknown_key(key: str, allowed: Iterable[str]) -> str:
    allowed = list(allowed)
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    listing = f"; expected one of: {', '.join(allowed)}" if allowed else ""
    return f"unknown key '{key}'{hint}{listing}"


def unknown_value(what: str, value: Any, allowed: Iterable[str]) -> str:
    allowed = list(allowed)
    close = difflib.get_close_matches(str(value), allowed, n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown {what} '{value}'{hint}; expected one of: {', '.join(allowed)}"


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"'{str(value).lower()}'"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"'{excerpt(value)}'"
    return excerpt(repr(value))


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _dotted(loc: Path_) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _line_of(lines: dict[Path_, int], loc: Path_) -> int | None:
    for n in range(len(loc), -1, -1):
        if tuple(loc[:n]) in lines:
            return lines[tuple(loc[:n])]
    return None


class DuplicateKey(Exception):
    def __init__(self, field: str, line: int) -> None:
        self.field, self.line = field, line


def _line_map(node: yaml.Node | None, prefix: Path_ = ()) -> dict[Path_, int]:
    """YAML line (1-based) of every key path in the document."""
    lines: dict[Path_, int] = {}
    if node is None:
        return lines
    lines.setdefault(prefix, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                raise DuplicateKey(_dotted((*prefix, key)), key_node.start_mark.line + 1)
            seen.add(key)
            lines[(*prefix, key)] = key_node.start_mark.line + 1
            for path, line in _line_map(value_node, (*prefix, key)).items():
                lines.setdefault(path, line)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines.update(_line_map(item, (*prefix, i)))
    return lines


# -- mapping pydantic's error locations back to the file's paths ------------------------


def _strip(tp: Any) -> Any:
    """The model type behind Annotated/Optional wrappers; a tuple for a union of several."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _strip(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(tp) if a is not type(None)]
        return _strip(members[0]) if len(members) == 1 else tuple(_strip(a) for a in members)
    return tp


def _tag(model: Any) -> str | None:
    if isinstance(model, type) and issubclass(model, BaseModel) and "kind" in model.model_fields:
        args = get_args(model.model_fields["kind"].annotation)
        return args[0] if args else None
    return None


def _field(model: type[BaseModel], key: str) -> Any:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info.annotation
    return None


def _fields_of(model: Any) -> list[str]:
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [info.alias or name for name, info in model.model_fields.items()]
    return []


def _clean_loc(root: type[BaseModel], loc: Iterable[str | int]) -> tuple[Path_, Any]:
    """Drop pydantic's union tags from `loc`; also return the model holding the last key."""
    path: list[str | int] = []
    current: Any = root
    parent: Any = root
    for element in loc:
        tp = _strip(current)
        if isinstance(tp, tuple):
            member = next((m for m in tp if _tag(m) == element), None)
            if member is not None or element in ("str", "int", "float", "bool"):
                current = member
                continue
            tp = None
        parent = tp
        path.append(element)
        if isinstance(element, int):
            current = get_args(tp)[0] if get_origin(tp) is list and get_args(tp) else None
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            current = _field(tp, element)
        else:
            current = None
    return tuple(path), parent

