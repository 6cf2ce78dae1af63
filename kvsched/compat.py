"""Which engine keys go together: one table of the combinations no engine family can honour.

Each engine family (`kvsched.engine.rules`: the step order picks it) reads some keys and not
others, and some values need others. `RULES` says so once, as data; `first_conflict` checks
an engine's values against it. `EngineConfig` refuses the `UNRUNNABLE` rows (the rule modules
would fail on them); a scenario's loader (`kvsched.scenario`) refuses every row, for each
variant, replica override, `--set` and sweep point, naming the key the user wrote.

Kinds of rows:
- `UNRUNNABLE`: the engine cannot run it (a rule module would fail, or divide by nothing).
- `REFUSED`: it would run, but the real engine refuses the configuration at start-up.
- `IGNORED`: the key belongs to another engine family, whose rules alone read it: under this
  step order (or admission rule) it would change nothing. Only a key written in the
  scenario, with a value other than its default, counts: a preset's own values never
  conflict with its step order, and a variant's `run.json` (which writes every key) reruns.

Kept free of imports from kvsched (`kvsched.config` imports it).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from enum import StrEnum
from typing import Any, NamedTuple


class Kind(StrEnum):
    UNRUNNABLE = "unrunnable"
    REFUSED = "refused"
    IGNORED = "ignored"


class Ref(NamedTuple):
    """The value of another key, in a condition: `("max_long_partial_prefills", "<=",
    Ref("max_num_partial_prefills"))`."""

    key: str


class Default:
    """The key's own `EngineConfig` default, in a condition: `(key, "!=", DEFAULT)`."""

    __slots__ = ()


DEFAULT = Default()
Cond = tuple[str, str, Any]  # (key, operator, value): ==, !=, in, >, >=, <=


class Rule(NamedTuple):
    """When every `when` condition holds, every `needs` condition must hold too.

    `when[0]` names the key the row is about; `expected` says in words what would do, `why`
    what the engine does. The loader blames the first key of `when`, then of `needs`, that
    the scenario wrote."""

    when: tuple[Cond, ...]
    needs: tuple[Cond, ...]
    expected: str
    why: str
    kind: Kind = Kind.IGNORED

    @property
    def keys(self) -> tuple[str, ...]:
        out = [key for key, _, _ in (*self.when, *self.needs)]
        out += [value.key for _, _, value in (*self.when, *self.needs) if isinstance(value, Ref)]
        return tuple(dict.fromkeys(out))

    @property
    def reads_defaults(self) -> bool:
        """Whether a condition compares a key with its own default (`DEFAULT`)."""
        return any(isinstance(value, Default) for _, _, value in (*self.when, *self.needs))


NOT_V1 = ("step_order", "in", ("prefill_first", "decode_first"))
SGLANG = ("admission_rule", "==", "future_tokens")
_RUNNABLE_ELSEWHERE = "step_order prefill_first or decode_first (presets lesson, vllm_v0, sglang)"

RULES: tuple[Rule, ...] = (
    # -- what no rule module can run (EngineConfig refuses these too) -------------------
    Rule((("preemption", "==", "swap"),), (NOT_V1,),
         f"preemption recompute, or {_RUNNABLE_ELSEWHERE}",
         "vLLM V1's running loop (step_order running_loop) has no swap: it preempts by "
         "recompute only",
         Kind.UNRUNNABLE),
    Rule((SGLANG,), (NOT_V1,),
         f"admission_rule blocks, or {_RUNNABLE_ELSEWHERE}",
         "future_tokens is SGLang's admission, made for prefill_first or decode_first steps, "
         "not vLLM V1's running loop", Kind.UNRUNNABLE),
    Rule((("enable_priority_scheduling", "==", True),), (SGLANG,),
         "admission_rule future_tokens (preset sglang)",
         "enable_priority_scheduling is SGLang's flag, read only by its future_tokens "
         "admission", Kind.UNRUNNABLE),
    Rule((("priority_preemption", "==", True),), (("step_order", "==", "prefill_first"),),
         "step_order prefill_first (vllm_v0 with chunked prefill off)",
         "priority_preemption is vLLM V0's default scheduler, which has no chunked mode",
         Kind.UNRUNNABLE),
    Rule((("max_num_partial_prefills", ">", 1),),
         (("chunked_prefill", "==", True), ("step_order", "==", "decode_first")),
         "chunked_prefill true and step_order decode_first (vllm_v0 with chunked prefill)",
         "partial prefills are vLLM V0's chunked mode", Kind.UNRUNNABLE),
    Rule((("max_long_partial_prefills", ">", 1),),
         (("max_long_partial_prefills", "<=", Ref("max_num_partial_prefills")),),
         "a max_num_partial_prefills at least as large",
         "the long prefills are some of the partial prefills: it must be <= "
         "max_num_partial_prefills", Kind.UNRUNNABLE),
    Rule((("max_num_partial_prefills", ">", 1), ("long_prefill_token_threshold", "==", 0)),
         (("max_model_len", "!=", None),),
         "a long_prefill_token_threshold > 0, or a max_model_len",
         "partial prefills need a threshold to tell long prompts, by default 4% of "
         "max_model_len", Kind.UNRUNNABLE),
    Rule((("null_block", "==", True),), (("num_blocks", ">=", 2),),
         "num_blocks >= 2",
         "the null block (vLLM V1's) takes one block of num_blocks, and none would be left",
         Kind.UNRUNNABLE),
    # -- what the real engine refuses ------------------------------------------------------
    Rule((("max_model_len", "!=", None), ("chunked_prefill", "==", False)),
         (("max_num_batched_tokens", ">=", Ref("max_model_len")),),
         "max_num_batched_tokens >= max_model_len, or chunked_prefill true",
         "vLLM refuses a max_num_batched_tokens below max_model_len without chunked "
         "prefill, and so does kvsched: a prompt between the two would be accepted and never "
         "run", Kind.REFUSED),
    # -- keys of another engine family: its rules alone read them --------------------------
    *(Rule(((key, "!=", DEFAULT),), (SGLANG,), "admission_rule future_tokens (preset sglang)",
           f"{key} is SGLang's, read only by its future_tokens admission")
      for key in ("max_prefill_tokens", "schedule_conservativeness",
                  "priority_scheduling_preemption_threshold")),
    Rule((("scheduler_reserve_full_isl", "==", False),),
         (("step_order", "==", "running_loop"),), "step_order running_loop (preset vllm_v1)",
         "scheduler_reserve_full_isl is vLLM V1's gate; the other step orders always "
         "reserve the whole prompt"),
    Rule((("mix_prefill_decode", "==", False),), (NOT_V1,), _RUNNABLE_ELSEWHERE,
         "vLLM V1's running loop always mixes prefills and decodes"),
    *(Rule((cond,), (NOT_V1,), _RUNNABLE_ELSEWHERE,
           f"{cond[0]} is read only by the admissions of the other step orders (vLLM V0's)")
      for cond in (("delay_factor", ">", 0), ("prefix_accounting", "==", "v0"),
                   ("readmit_victims", "==", False), ("append_free_block", "==", True))),
    *(Rule((cond,), (NOT_V1,), _RUNNABLE_ELSEWHERE,
           f"{cond[0]} is about swapped requests, and vLLM V1's running loop never swaps")
      for cond in (("swapped_fifo", "==", True), ("swap_prefills", "==", True),
                   ("swap_in_front", "==", True), ("prefill_past_swapped", "==", True))),
    Rule((("async_scheduling", "==", True),), (("step_order", "==", "running_loop"),),
         "step_order running_loop (preset vllm_v1)",
         "async_scheduling is vLLM V1's AsyncScheduler, modelled for V1's running loop "
         "only"),
    Rule((("swap_in_after_preempt", "==", False),), (("step_order", "==", "decode_first"),),
         "step_order decode_first (vllm_v0 with chunked prefill)",
         "swap_in_after_preempt is read only by decode_first steps (vLLM V0's chunked "
         "scheduler); prefill_first steps follow admit_after_preempt"),
)


class Conflict(NamedTuple):
    """A combination `RULES` refuses: the row, the key blamed (one the caller wrote, when it
    wrote one) and a message of one line."""

    rule: Rule
    key: str
    message: str


def first_conflict(values: Mapping[str, Any], written: Collection[str] | None = None,
                   kinds: Collection[Kind] = tuple(Kind), origin: str = "",
                   prefer: Collection[str] = (),
                   defaults: Mapping[str, Any] | None = None) -> Conflict | None:
    """The first row of `RULES` (of `kinds`) that `values` break, or None.

    `values` holds every engine key, `step_order` as it runs (see
    `kvsched.config.effective_step_order`). `written`: the keys the user wrote, or None
    when every key counts as written (a library caller's `EngineConfig`); `IGNORED` rows
    apply only to a written key. The key blamed is the first of the row's keys in
    `prefer` (a replica override's keys), else in `written`. `origin` names where the keys
    not written come from (`preset vllm_v1`). `defaults`: each key's own default
    (`kvsched.config.ENGINE_DEFAULTS`), for the rows that compare a key with it (`DEFAULT`);
    they are skipped without it (`EngineConfig`'s own check reads none of them)."""
    for rule in RULES:
        if rule.kind not in kinds or (defaults is None and rule.reads_defaults):
            continue
        if not all(_holds(c, values, defaults) for c in rule.when):
            continue
        about = rule.when[0][0]
        if rule.kind is Kind.IGNORED and written is not None and about not in written:
            continue
        if all(_holds(c, values, defaults) for c in rule.needs):
            continue
        key = about if written is None else next(
            (k for k in rule.keys if k in prefer),
            next((k for k in rule.keys if k in written), about))
        return Conflict(rule, key, _message(rule, key, values, written, origin))
    return None


def _holds(cond: Cond, values: Mapping[str, Any], defaults: Mapping[str, Any] | None) -> bool:
    key, op, value = cond
    have = values[key]
    if isinstance(value, Ref):
        value = values[value.key]
    elif isinstance(value, Default):
        assert defaults is not None  # (first_conflict skips the row without them)
        value = defaults[key]
    if op == "==":
        return have == value
    if op == "!=":
        return have != value
    if op == "in":
        return have in value
    if have is None or value is None:
        return False
    if op == ">":
        return have > value
    if op == ">=":
        return have >= value
    if op == "<=":
        return have <= value
    raise ValueError(f"unknown operator {op!r}")  # (a bug in RULES)


def show(value: Any) -> str:
    """A value as the scenario file spells it."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    return str(value)


def _message(rule: Rule, key: str, values: Mapping[str, Any],
             written: Collection[str] | None, origin: str) -> str:
    """`<value> cannot run with <the row's other keys and values>: <why>; expected ...`,
    the keys not written grouped after `origin`."""
    verb = {Kind.UNRUNNABLE: "cannot run", Kind.REFUSED: "is refused",
            Kind.IGNORED: "would be ignored"}[rule.kind]
    others = [k for k in rule.keys if k != key]
    given = [f"{k} {show(values[k])}" for k in others if written is None or k in written]
    implied = [f"{k} {show(values[k])}" for k in others
               if written is not None and k not in written]
    text = f"{show(values[key])} {verb}"
    source = f" from {origin}" if origin else ""
    if given:
        text += " with " + ", ".join(given)
        if implied:
            text += f" (and {', '.join(implied)}{source})"
    elif implied:
        text += f" with {', '.join(implied)}" + (f" ({source.strip()})" if origin else "")
    return f"{text}: {rule.why}; expected {rule.expected}"
