"""Training mixes: MetadatasetV2 blends over a run's published subsets, weighted by tokens or samples.

``vlmforge mix OUT --name ocr_heavy --weights "docvqa=2,chartqa_*=1" --by tokens`` writes
``OUT/energon/ocr_heavy.yaml`` (next to ``metadataset.yaml``, so leaves are ``./<subset>``) and
``OUT/energon/ocr_heavy.mix.json`` (the plan below, for scripts).

* **Weights** are ``pattern=weight`` items; a pattern is a subset name or an ``fnmatch`` glob. An exact
  name wins over globs, otherwise the first matching glob; weight 0 leaves a subset out; subsets no
  pattern matches are not in the mix; a pattern that matches no published subset is an error (typos).
  Without ``--weights`` every published subset gets weight 1.
* ``--by tokens`` (default): weights are target shares of *tokens*. Energon's blend draws a dataset per
  sample with probability proportional to its blend weight, so the blend weight of subset *i* is
  ``w_i / mean_tokens_i`` (normalised), where the mean is over the train samples the mix uses, read from
  the ``samples`` manifest (``total_tokens`` of ok, published samples). ``--by samples``: weights are
  target shares of samples (blend weight = ``w_i``). Both shares are printed.
* ``--license-allow`` keeps only subsets whose license (``subsets`` manifest) matches one of the given ids
  or globs (case-insensitive); the others are listed as excluded.
* ``--max-tokens N``: the mix is meant to be trained for N tokens. Subset *i* then contributes
  ``share_i * N`` tokens: when it has more, the leaf gets ``subset: {range: [0, k]}`` with the first *k*
  samples (write order = JSONL line order) whose tokens fit; when it has fewer it is repeated, shown as
  ``epochs`` > 1.
* **Open files**: a loader worker keeps up to ``parallel_shard_iters`` (Energon default 16) shards of every
  leaf open, each with its ``.tar.idx`` (docs/energon-format.md §8, issue #81): 76 subsets x 16 x 2 > 2400
  handles, beyond a common ``ulimit -n`` of 1024. The mix picks the largest ``parallel_shard_iters`` in
  1, 2, 4, 8, 16 for which ``sum(2 * min(psi, shards_i))`` stays within ``max_open_files`` (default 512)
  and points each leaf at ``.nv-meta/dataset_psi<N>.yaml`` through ``dataset_config``.
* ``val`` concatenates the val splits of the mixed subsets that have one (Energon ignores weights there).

Energon issue #266 (a leaf reachable twice yields the same order twice) cannot happen: every subset
appears once.
"""
