"""Where each buggy program of ``examples/`` is fixed: the truth a localization score needs.

Every buggy program (``train_buggy*`` in any collection, and a planted ``train`` with its
``train_fixed`` twin) has one ``FixLine``: the line its fix changes, found by an
**anchor**, text that occurs on exactly one line of the file (of the function or class
``within`` names, when the text recurs elsewhere). No line number is written down: a
number rots when the file above it changes, an anchor fails its test
(``tests/test_fix_lines.py``) when the line itself does.

Which line: the one the module's docstring calls the bug (most carry a ``# the bug``
comment); where the twins share code behind a flag, the line at which the buggy twin's
path leaves the fixed one; where the fix is a method the buggy class lacks
(``state_dict``), the class's own line. ``scope()`` is the function (or class) holding the
line: a report that names a line of it points the reader to the right hook.

``benchmarks/program_lines.py`` scores what ``chaoslight fuzz`` reports against these.
Importing this module needs neither torch nor Lightning (``ast`` reads the files).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Programs whose only bug is Lightning's own (``known_issues/README.md``): the fix is a
# workaround, not a line of the program's, and the search reports them apart.
FRAMEWORK_BUGS: frozenset[str] = frozenset(
    {
        "known_issues/batch_sampler_rebuilt.py:train",
        "known_issues/custom_sampler_order.py:train",
        "known_issues/fabric_loader_epoch.py:train",
        "known_issues/eval_batch_sampler_shuffle.py:train",
        "known_issues/iteration_resume.py:train",
        "known_issues/on_exception_checkpoint.py:train",
        "known_issues/resume_repeats_batch.py:train",
        "known_issues/resume_workers_epoch_zero.py:train",
        "known_issues/sigterm_beside_faults.py:train",
        "known_issues/sigterm_exit_zero.py:train_buggy",
        "known_issues/static_graph_manual.py:train",
    }
)

_Scope = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


@dataclass(frozen=True)
class Scope:
    """A function or class of a file: its qualified name and its lines, decorators in."""

    name: str
    first: int
    last: int

    def holds(self, line: int) -> bool:
        return self.first <= line <= self.last


@dataclass(frozen=True)
class FixLine:
    """One buggy program (``target``: ``folder/file.py:function`` under ``examples/``) and
    the line its fix changes (``anchor``, within ``within`` when given). ``world_size``:
    the ranks the program is run on (its bug needs that many)."""

    target: str
    anchor: str
    within: str = ""
    world_size: int = 2

    @property
    def path(self) -> Path:
        return HERE / self.target.split(":")[0]

    @property
    def function(self) -> str:
        return self.target.split(":")[1]

    @property
    def name(self) -> str:
        """``bugs/rank0_save_checkpoint:train_buggy``: short, for tables."""
        file, function = self.target.split(":")
        return f"{file.removesuffix('.py')}:{function}"

    def matches(self) -> list[int]:
        """The lines (1-based) holding the anchor, inside ``within`` when given."""
        lines = self.path.read_text().splitlines()
        first, last = 1, len(lines)
        if self.within:
            found = [s for s in scopes(self.path) if s.name == self.within]
            if len(found) != 1:
                return []
            first, last = found[0].first, found[0].last
        return [n for n in range(first, last + 1) if self.anchor in lines[n - 1]]

    def line(self) -> int:
        """The fix line; ValueError unless the anchor is on exactly one line."""
        found = self.matches()
        if len(found) != 1:
            where = f" within {self.within}" if self.within else ""
            raise ValueError(f"{self.target}: {self.anchor!r}{where} is on {len(found)} lines")
        return found[0]

    def scope(self) -> Scope | None:
        """The innermost function or class holding the fix line (None: module level)."""
        line = self.line()
        holding = [s for s in scopes(self.path) if s.holds(line)]
        return min(holding, key=lambda s: s.last - s.first, default=None)


@cache
def scopes(path: Path) -> tuple[Scope, ...]:
    """Every function and class of ``path``, by qualified name (``Model.training_step``)."""
    found: list[Scope] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _Scope):
                name = prefix + child.name
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                found.append(Scope(name, first, child.end_lineno or child.lineno))
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(path.read_text()), "")
    return tuple(found)


def buggy_targets() -> list[str]:
    """Every buggy program of ``examples/``'s collections, read from the files: each
    ``train_buggy*`` function, and ``train`` where a ``train_fixed`` twin stands beside it,
    less ``FRAMEWORK_BUGS``."""
    targets = []
    for path in sorted(HERE.glob("*/*.py")):
        if path.name.startswith("_"):
            continue
        names = {s.name for s in scopes(path)}
        relative = path.relative_to(HERE).as_posix()
        for name in sorted(names):
            buggy = name.startswith("train_buggy")
            planted = name == "train" and "train_fixed" in names
            target = f"{relative}:{name}"
            if (buggy or planted) and target not in FRAMEWORK_BUGS:
                targets.append(target)
    return targets


FIX_LINES: tuple[FixLine, ...] = (
    # examples/bugs
    FixLine("bugs/rank0_save_checkpoint.py:train_buggy", "# the bug: save_checkpoint's barrier"),
    FixLine("bugs/setup_stats_file.py:train_buggy", "_write_stats()  # the bug"),
    FixLine("bugs/local_should_stop.py:train_buggy", "trainer.should_stop = True  # buggy twin"),
    FixLine("bugs/uneven_file_shards.py:train_buggy", "if not self.by_record:  # the bug"),
    FixLine("bugs/uneven_all_gather.py:train_buggy", "keep = y[:, 0] != -1.0  # the bug"),
    FixLine("bugs/rank_zero_scheduler.py:train_buggy", "# the bug: rank 0 only"),
    FixLine("bugs/unsynced_batchnorm.py:train_buggy", "if self.synced and self.trainer.world_size"),
    FixLine("bugs/constant_loss_on_error.py:train_buggy", "# the bug: no graph, no gradient sync"),
    FixLine("bugs/on_exception_collective.py:train_buggy", "if self.global_count:  # the bug"),
    FixLine("bugs/unsynced_checkpoint_monitor.py:train_buggy", "# buggy twin: this rank's own"),
    FixLine("bugs/gan_skip_step.py:train_buggy", "# buggy twin: this rank's own loss decides"),
    FixLine("bugs/conditional_sync_log.py:train_buggy", "elif loss > HARD:  # the bug"),
    FixLine("bugs/accumulation_no_sync.py:train_buggy", "boundary = True  # the fix"),
    FixLine("bugs/polled_file_fallback.py:train_buggy", "# the bug: a timeout and a fallback"),
    FixLine("bugs/preempt_returns_zero.py:train_buggy", "_run()", within="train_buggy"),
    FixLine("bugs/emergency_save_workers.py:train_buggy", "worker_init_fn=worker_init_fn", "_run"),
    FixLine("bugs/sampler_loses_shuffle.py:train_buggy", "if self.tells_epoch:  # the fix"),
    FixLine("bugs/slow_epoch_rng.py:train_buggy", "torch.randint(len(dataset), (), generator="),
    FixLine("bugs/frozen_peer_poll.py:train_buggy", "while not os.path.exists(path):  # the bug"),
    FixLine("bugs/swallowed_abort.py:train_buggy", "try:  # the bug"),
    FixLine("bugs/nan_debug_dump.py:train_buggy", "if bad and not self.dumped:  # the bug"),
    FixLine("bugs/dedup_skip_step.py:train_buggy", "if fresh:  # the bug"),
    FixLine("bugs/resume_fresh_on_error.py:train_buggy", "model = Regressor()  # the bug"),
    FixLine("bugs/caught_value_error_skip.py:train_buggy", "if self.agree and dist.is_available()"),
    # examples/catalogue
    FixLine("catalogue/shared_file.py:train_buggy", 'with open(STATE, "w") as handle:  # the bug'),
    FixLine("catalogue/rank0_memory.py:train_buggy", "self.frames.append(frame)  # the bug"),
    FixLine("catalogue/rank_numerics.py:train_buggy", "# bug when False: per rank"),
    FixLine("catalogue/one_rank_edit.py:train_buggy", "_constrain(weight)  # the bug"),
    FixLine("catalogue/unsharded_sampler.py:train_buggy", "if self.shard_by_rank:"),
    FixLine("catalogue/swallowed_exception.py:train_buggy", "return None  # the bug"),
    FixLine("catalogue/swallowed_exception.py:train_buggy_automatic", "return None  # the bug"),
    FixLine("catalogue/unseeded_augmentation.py:train_buggy", "np.random.default_rng()  # the bug"),
    FixLine("catalogue/bf16_numerics.py:train_buggy", "- mean * mean  # the bug"),
    FixLine("catalogue/temporary_lifetime.py:train_buggy", "self.last_scores = scores  # the bug"),
    FixLine("catalogue/async_epoch_end.py:train_buggy", "self.pending.result()  # the fix"),
    FixLine("catalogue/unsynchronised_async.py:train_buggy", "# the bug: may be this rank's"),
    FixLine("catalogue/preemption.py:train_buggy", "_fit(LinearRegression)", within="train_buggy"),
    FixLine("catalogue/rank0_prepared_stats.py:train_buggy", "os.path.exists(STATS):  # the bug"),
    FixLine("catalogue/stale_lock_file.py:train_buggy", "time.sleep(POLL_SECONDS)  # the bug"),
    FixLine("catalogue/retried_collective.py:train_buggy", "except RuntimeError:  # the bug"),
    FixLine("catalogue/skipped_records.py:train_buggy", "continue  # the bug"),
    FixLine(
        "catalogue/newest_loadable_checkpoint.py:train_buggy",
        "continue  # an older checkpoint",
        within="newest_this_rank_can_load",
    ),
    FixLine("catalogue/nonfinite_skip.py:train_buggy", "if not finite:  # the bug"),
    FixLine("catalogue/preemption_workers.py:train_buggy", "worker_init_fn=worker_init_fn", "_run"),
    # examples/corpus
    FixLine("corpus/oom_skip.py:train_buggy", "if self.coordinated and dist.is_available()"),
    FixLine("corpus/iterable_shards.py:train_buggy", "if self.shard_by_rank else (0, 1)"),
    FixLine("corpus/atomic_checkpoint.py:train_buggy", 'with open(SIDE_FILE, "w") as handle:'),
    FixLine("corpus/callback_state.py:train_buggy", "class StepDecay(pl.Callback):"),
    FixLine("corpus/metrics_sync.py:train_buggy", "if self.every_rank or self.trainer.is_global"),
    FixLine("corpus/manual_opt.py:train_buggy", "elif bool(keep.all()):"),
    FixLine("corpus/two_fits.py:train_buggy", "@rank_zero_only", "RankZeroFineTuneRate"),
    FixLine("corpus/resume_last.py:train_buggy", 'with open(WEIGHTS, "wb") as handle:'),
    FixLine("corpus/uneven_batches.py:train_buggy", "return iter(range(rank, self.n, world))"),
    FixLine("corpus/val_every_n.py:train_buggy", "if self.every_rank or self.global_rank == 0:"),
    FixLine(
        "corpus/three_rank_reduce.py:train_buggy",
        "start = 0 if self.fixed_order else",
        world_size=3,  # with two ranks the bug cannot show (its docstring)
    ),
    # examples/planted
    FixLine("planted/epoch_end_save.py:train", "self.trainer.strategy.barrier()  # the bug"),
    FixLine("planted/epoch_race.py:train", "self.trainer.strategy.barrier()  # the fix"),
    FixLine("planted/one_rank_collective.py:train", "rank_zero_only(self._log)(module)  # the bug"),
    FixLine("planted/swallowed_oom.py:train", "return None  # the bug"),
    FixLine("planted/two_rank_skips.py:train", "if self.strict and ranks_that_skipped > 1:"),
    # examples/restart
    FixLine("restart/callback_state.py:train_buggy", "class WarmUp(pl.Callback):"),
    FixLine(
        "restart/hand_scheduler.py:train_buggy", "if self.checkpointed:", "Model.on_save_checkpoint"
    ),
    FixLine("restart/resume_fallback.py:train_buggy", "except Exception as error:  # the bug"),
    FixLine("restart/side_checkpoint.py:train_buggy", 'with open(SIDE, "wb") as handle:'),
    FixLine("restart/warmup_counter.py:train_buggy", "class WarmUp(pl.Callback):"),
    # examples/loops: Fabric and plain PyTorch loops
    FixLine("loops/plain_caught_oom.py:train_buggy", "continue  # the bug", "_train"),
    FixLine("loops/plain_rank0_save_race.py:train_buggy", "if wait:", "_train"),
    FixLine(
        "loops/plain_fsdp_rank0_save.py:train_buggy",
        "elif dist.get_rank() == 0:  # the bug",
        "_train",
    ),
    FixLine("loops/plain_inplace_checkpoint.py:train_buggy", "torch.save(state, PATH)  #", "_save"),
    FixLine("loops/fabric_caught_oom.py:train_buggy", "continue  # the bug", "_train"),
    FixLine(
        "loops/fabric_rank0_save.py:train_buggy",
        "if step % 4 == 3 and (everyone or runner.global_rank == 0):",
        "_train",
    ),
    FixLine("loops/fabric_sigterm_save.py:train_buggy", "if agree else stop", "_train"),
    FixLine("loops/fabric_error_report.py:train_buggy", "elif rank == 0:  # the bug", "_report"),
    FixLine("loops/plain_error_flush.py:train_buggy", "elif rank == 0:  # the bug", "_train"),
    FixLine(
        "loops/plain_sigterm_barrier.py:train_buggy", "_emergency_save(net)  # the bug", "_train"
    ),
    FixLine("loops/fabric_slow_epoch_rng.py:train_buggy", "generator=generator))", "_train"),
    FixLine("loops/fabric_spike_reduce.py:train_buggy", "if not every_step:  # the bug", "_train"),
    FixLine("loops/fabric_resume_scheduler.py:train_buggy", "# the bug is its absence", "_train"),
    FixLine(
        "loops/plain_resume_sampler_epoch.py:train_buggy",
        "sampler.set_epoch(epoch + 1)  # the bug",
        "_train",
    ),
    FixLine("loops/plain_no_set_epoch.py:train_buggy", "if set_epoch:", "_train"),
    FixLine("loops/plain_skip_nonfinite.py:train_buggy", "if agree:", "_train"),
    # examples/known_issues: the one whose bug is the program's, not Lightning's
    FixLine("known_issues/preemption_own_bug.py:train_buggy", "if self.rank_zero_only:  # the bug"),
)

BY_TARGET = {entry.target: entry for entry in FIX_LINES}
