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

from ._sampling import EXCLUSION_REASONS as EXCLUSION_REASONS
from ._sampling import MODES as MODES
from ._sampling import REASON_DUPLICATE as REASON_DUPLICATE
from ._sampling import REASON_ELIGIBLE as REASON_ELIGIBLE
from ._sampling import REASON_MISSING_TEACHER as REASON_MISSING_TEACHER
from ._sampling import REASON_NO_OP as REASON_NO_OP
from ._sampling import REASON_NOT_SELECTED as REASON_NOT_SELECTED
from ._sampling import REASON_OVER_CAP as REASON_OVER_CAP
from ._sampling import REASON_PAIRWISE_LIMIT as REASON_PAIRWISE_LIMIT
from ._sampling import REASON_TEACHER_ANCHOR as REASON_TEACHER_ANCHOR
from ._sampling import REASON_TOO_MANY_AXES as REASON_TOO_MANY_AXES
from ._sampling import SOURCE_TEACHER as SOURCE_TEACHER
from ._sampling import Candidate as Candidate
from ._sampling import SamplingError as SamplingError
from ._sampling import SparseSampleManifest as SparseSampleManifest
from ._sampling import SparseSampleRecord as SparseSampleRecord
from ._sampling import SparseSamplingPolicy as SparseSamplingPolicy
from ._sampling import SubblockConfig as SubblockConfig
from ._sampling import canonical_json as canonical_json
from ._sampling import manifest_from_dict as manifest_from_dict
from ._sampling import record_from_dict as record_from_dict
from ._sampling import sample_replacement_candidates as sample_replacement_candidates
from ._sampling import sample_subblock_configs as sample_subblock_configs
from ._sampling import stable_hash as stable_hash
from ._sampling_kit import DOCUMENT_KIND as DOCUMENT_KIND
from ._sampling_kit import NAMING_SCHEMES as NAMING_SCHEMES
from ._sampling_kit import ModelLayout as ModelLayout
from ._sampling_kit import NamingScheme as NamingScheme
from ._sampling_kit import candidates_from_model as candidates_from_model
from ._sampling_kit import export_manifest as export_manifest
from ._sampling_kit import list_manifests as list_manifests
from ._sampling_kit import load_manifest as load_manifest
from ._sampling_kit import materialize as materialize
from ._sampling_kit import model_layout as model_layout
from ._sampling_kit import save_manifest as save_manifest
from ._sampling_kit import slice_block as slice_block
