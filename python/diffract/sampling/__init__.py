"""Sparse sampling of replacement candidates for architecture search.

A *candidate library* holds, for each layer of a teacher model, the teacher's own block and
derived blocks (an FFN with fewer intermediate channels, attention with fewer KV heads, a
disabled subblock, ...). The samplers choose a small, reproducible subset to analyze and
distill and record why every other candidate was left out:

* :func:`sample_replacement_candidates` -- whole-layer candidates, at most
  ``replacement_cap`` per hidden width;
* :func:`sample_subblock_configs` -- layer-independent subblock configs per family.

The kit connection builds candidates from a stored model (:func:`candidates_from_model`),
adds selected ones to a session as models (:func:`materialize`), and persists manifests
(:func:`save_manifest`, :func:`load_manifest`, :func:`list_manifests`). See docs/sampling.md.

The core is pure Python: importing this module imports neither numpy nor torch.
"""

from __future__ import annotations

from diffract.sampling.base import (
    EXCLUSION_REASONS as EXCLUSION_REASONS,
    MODES as MODES,
    REASON_DUPLICATE as REASON_DUPLICATE,
    REASON_ELIGIBLE as REASON_ELIGIBLE,
    REASON_MISSING_TEACHER as REASON_MISSING_TEACHER,
    REASON_NO_OP as REASON_NO_OP,
    REASON_NOT_SELECTED as REASON_NOT_SELECTED,
    REASON_OVER_CAP as REASON_OVER_CAP,
    REASON_PAIRWISE_LIMIT as REASON_PAIRWISE_LIMIT,
    REASON_TEACHER_ANCHOR as REASON_TEACHER_ANCHOR,
    REASON_TOO_MANY_AXES as REASON_TOO_MANY_AXES,
    SOURCE_TEACHER as SOURCE_TEACHER,
    SamplingError as SamplingError,
    canonical_json as canonical_json,
    stable_hash as stable_hash,
)
from diffract.sampling.candidates import (
    Candidate as Candidate,
    SparseSamplingPolicy as SparseSamplingPolicy,
    SubblockConfig as SubblockConfig,
)
from diffract.sampling.layout import (
    NAMING_SCHEMES as NAMING_SCHEMES,
    ModelLayout as ModelLayout,
    NamingScheme as NamingScheme,
    model_layout as model_layout,
)
from diffract.sampling.library import (
    candidates_from_model as candidates_from_model,
    slice_block as slice_block,
)
from diffract.sampling.manifests import (
    DOCUMENT_KIND as DOCUMENT_KIND,
    ManifestDocumentError as ManifestDocumentError,
    export_manifest as export_manifest,
    list_manifests as list_manifests,
    load_manifest as load_manifest,
    save_manifest as save_manifest,
)
from diffract.sampling.materialize import materialize as materialize
from diffract.sampling.records import (
    SparseSampleManifest as SparseSampleManifest,
    SparseSampleRecord as SparseSampleRecord,
    manifest_from_dict as manifest_from_dict,
    record_from_dict as record_from_dict,
)
from diffract.sampling.select import (
    sample_replacement_candidates as sample_replacement_candidates,
    sample_subblock_configs as sample_subblock_configs,
)
