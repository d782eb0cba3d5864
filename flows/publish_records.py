"""A run's records of what it published (:mod:`vlmforge.tasks.publish.current`), kept as its subsets pass
their stages: a subset whose every batch was current and whose inputs, options and code are those of its last
publish is left as it is (reported ``unchanged``: not gated, published or read back again)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..schemas.records import SubsetEntry
from ..schemas.stage_options import PublishWork
from ..tasks.gate import carry_results
from ..tasks.manifests import OutputLayout
from ..tasks.publish import current_publish, forget_current, publish_fingerprint, record_current
from .runtime import progress
from .summary import SubsetOutcome

UNCHANGED = "unchanged: "  # the gate column of an unchanged subset starts so, then its earlier verdict


@dataclass
class PublishRecords:
    layout: OutputLayout
    run_id: str
    fingerprints: dict[str, str] = field(default_factory=dict)  # subset -> its publish fingerprint

    def unchanged(
        self, entry: SubsetEntry, publish: PublishWork, o: SubsetOutcome, *, all_current: bool
    ) -> bool | None:
        """``o``'s subset has its batches in (``all_current``: every one skipped as current). When it is as at
        its last publish, the earlier verdict and dataset stand (its quality results are carried into this
        run's): whether that dataset was read back already. None when it goes through its stages again (its
        record is then removed: it no longer vouches for the dataset)."""
        self.fingerprints[entry.subset] = publish_fingerprint(entry, publish)
        record = (
            current_publish(self.layout, entry.subset, self.fingerprints[entry.subset])
            if all_current
            else None
        )
        if record is None:
            forget_current(self.layout, entry.subset)
            return None
        o.unchanged, o.published, o.shards = True, True, record.shards
        o.gate, o.validation = UNCHANGED + record.gate, "unchanged" if record.validated else "not run"
        carry_results(self.layout, o.subset, record.run_id, self.run_id)
        progress.subset_stage(o.subset, "unchanged")
        return record.validated

    def published(self, o: SubsetOutcome) -> None:
        """Published: a run stopped before the read-back leaves the next only the read-back to do."""
        if o.published:
            self._record(o, validated=False)

    def validated(self, o: SubsetOutcome) -> None:
        """Read back correctly: a later run with nothing changed leaves the subset as it is; read back wrong:
        the next run publishes it again."""
        if o.validation == "ok":
            self._record(o, validated=True)
        else:
            forget_current(self.layout, o.subset)

    def _record(self, o: SubsetOutcome, *, validated: bool) -> None:
        record_current(
            self.layout,
            o.subset,
            self.fingerprints[o.subset],
            run_id=self.run_id,
            gate=o.gate.removeprefix(UNCHANGED),
            shards=o.shards,
            validated=validated,
        )
