"""The editable step model: one representative steady step per rank as data
(:mod:`.steps`), built from the step graph (:mod:`.build`), replayed into a predicted step time
(:mod:`.replay`), changed by edits (:mod:`.edits`) that the remedies (:mod:`.catalog`) are made
of."""

from stepscope.model.stepmodel.build import build_step_model, representative_step
from stepscope.model.stepmodel.replay import Replay, replay
from stepscope.model.stepmodel.steps import StepModel

__all__ = ["Replay", "StepModel", "build_step_model", "replay", "representative_step"]
