"""Alerts while training: an event when a layer crosses a diagnosis rule (``diag_*``).

After each committed step the tracker's worker reads the step's stored ``diag_<rule>``
fields and compares each layer with its state at the previous step: a layer that turns
flagged (alpha falls below 2, a trap appears) raises one :class:`RuleEvent` — to the
``on_alert`` callbacks and, if asked, as a :class:`DiagnosisWarning` — and not again until
it has been unflagged at a later step. A rule listed in ``stop_on`` also sets the tracker's
experimental stop signal, which the Keras, Lightning and Hugging Face callbacks act on.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from diffract._errors import InvalidArgumentError
from diffract.kernels.diagnosis import RULES


class DiagnosisWarning(UserWarning):
    """A layer crossed a diagnosis rule during a tracked run (see :class:`RuleEvent`)."""


@dataclass(frozen=True)
class RuleEvent:
    """One crossing: a layer of a tracked run became flagged by a rule at a step.

    Attributes:
        run: the tracked run.
        step: the training step whose checkpoint first shows it.
        model_id: that checkpoint's model id.
        name: the layer (parameter name).
        rule: the rule (``over_trained``, ``trap``, ... see ``diffract.kernels.diagnosis``).
        reason: the rule's one-line reason, with its numbers.
    """

    run: str
    step: int
    model_id: str
    name: str
    rule: str
    reason: str

    def __str__(self) -> str:
        return (
            f"run {self.run!r} step {self.step}: {self.name} is {self.rule.replace('_', '-')} "
            f"({self.reason})"
        )


AlertCallback = Callable[[RuleEvent], None]


def check_rules(rules: bool | str | Sequence[str] | None, what: str) -> tuple[str, ...]:
    """The rules named by ``alerts=`` / ``stop_on=``: True means all, False/None none."""
    if rules is None or rules is False:
        return ()
    if rules is True:
        return tuple(RULES)
    names = [rules] if isinstance(rules, str) else list(rules)
    bad = [r for r in names if r not in RULES]
    if bad:
        raise InvalidArgumentError(f"{what}: unknown rule(s) {bad}; rules: {list(RULES)}")
    return tuple(dict.fromkeys(names))


def alert_callbacks(on_alert: Any) -> list[AlertCallback]:
    """``on_alert=`` as a list of callables (None: none)."""
    if on_alert is None:
        return []
    cbs = list(on_alert) if isinstance(on_alert, list | tuple) else [on_alert]
    if not all(callable(cb) for cb in cbs):
        raise InvalidArgumentError("on_alert must be a callable on_alert(event) or a list of them")
    return cbs


def rule_fields(rules: Sequence[str]) -> list[str]:
    """The fields the alerts of ``rules`` read."""
    return [f for r in rules for f in (f"diag_{r}", f"diag_{r}_reason")]


class Alerts:
    """The rules watched for one tracker, each layer's last state, and the stop signal.

    Args:
        run: the tracked run.
        rules: the rules watched.
        callbacks: called with each :class:`RuleEvent` (in the worker thread).
        warn: also emit each event as a :class:`DiagnosisWarning`.
        stop_on: rules whose events set the stop signal (experimental).
    """

    def __init__(
        self,
        run: str,
        rules: Sequence[str],
        callbacks: Sequence[AlertCallback],
        *,
        warn: bool = True,
        stop_on: Sequence[str] = (),
    ) -> None:
        self.run, self.rules, self.callbacks = run, tuple(rules), list(callbacks)
        self.warn, self.stop_on = warn, tuple(stop_on)
        self._state: dict[tuple[str, str], bool] = {}
        self._lock = threading.Lock()
        self.events: list[RuleEvent] = []
        #: the first event that asked to stop, or None
        self.stop_event: RuleEvent | None = None

    def observe(self, scope: Any, step: int, model_id: str) -> list[RuleEvent]:
        """Read the step's diagnosis fields from ``scope`` (that checkpoint) and return the
        new crossings (also recorded, called back, warned and checked against ``stop_on``)."""
        from diffract._errors import FieldNotComputedError

        fields = rule_fields(self.rules)
        try:
            rows = scope.results.export_table(*fields, export_format="list")
        except FieldNotComputedError:
            return []
        new = []
        with self._lock:
            for row in rows:
                for rule in self.rules:
                    flag = row.get(f"diag_{rule}")
                    if flag is None:
                        continue
                    key = (str(row["name"]), rule)
                    was = self._state.get(key, False)
                    self._state[key] = bool(flag)
                    if bool(flag) and not was:
                        reason = str(row.get(f"diag_{rule}_reason") or "")
                        new.append(RuleEvent(self.run, step, model_id, key[0], rule, reason))
            self.events.extend(new)
            for ev in new:
                if ev.rule in self.stop_on and self.stop_event is None:
                    self.stop_event = ev
        return new

    def emit(self, events: Sequence[RuleEvent]) -> list[str]:
        """Call the callbacks (and warn) for each event; returns the callbacks' errors."""
        errors = []
        for ev in events:
            if self.warn:
                try:
                    warnings.warn(str(ev), DiagnosisWarning, stacklevel=2)
                except Exception as exc:  # warnings turned into errors: reported, not raised
                    errors.append(f"alert warning: {exc!r}")
            for cb in self.callbacks:
                try:
                    cb(ev)
                except Exception as exc:  # a callback's error must not stop the worker
                    errors.append(f"on_alert callback: {exc!r}")
        return errors
