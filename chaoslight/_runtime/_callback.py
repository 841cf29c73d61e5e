"""``ChaosCallback``: injection as a Lightning callback, for code that cannot wrap fit."""

from __future__ import annotations

from typing import Any

from chaoslight._runtime._context import callback_bases
from chaoslight._runtime._inject import Injection, Run, ScheduleLike, inject


class _ChaosCallbackMixin:
    def __init__(self, schedule: ScheduleLike = None, **inject_options: Any) -> None:
        self._injection: Injection = inject(schedule, **inject_options)
        self._entered = False
        self.run: Run = self._injection.run

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if not self._entered:
            self.run = self._injection.__enter__()
            self._entered = True
            engine = self._injection.engine
            if engine is not None:
                engine.saw_trainer(trainer)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._exit(None)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """The fit failed: the checks judge a failed run, and the fit's error stays the error.

        Lightning re-raises ``exception`` after this hook, but only if the hook itself
        does not raise: an error of ours (a check's ``exit()``) is attached to it as a
        note instead of replacing it.
        """
        try:
            self._exit(exception)
        except Exception as ours:
            if hasattr(exception, "add_note"):  # Python 3.11+
                exception.add_note(f"chaoslight: while exiting: {type(ours).__name__}: {ours}")

    def _exit(self, exception: BaseException | None) -> None:
        if self._entered:
            self._entered = False
            kind = type(exception) if exception is not None else None
            traceback = exception.__traceback__ if exception is not None else None
            self._injection.__exit__(kind, exception, traceback)


ChaosCallback = type(
    "ChaosCallback",
    (_ChaosCallbackMixin, *callback_bases()),
    {
        "__doc__": "Activate a schedule from ``setup`` to ``teardown`` of a Trainer run:\n\n"
        "    Trainer(callbacks=[chaoslight.ChaosCallback(schedule)])\n\n"
        "``callback.run`` holds the events afterwards. Works with both ``lightning.pytorch`` "
        "and ``pytorch_lightning``.",
        "__module__": __name__,
    },
)
