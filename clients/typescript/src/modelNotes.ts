/**
 * Decisions worded for the model (issue 43). An agent whose loopguard config says
 * `warnings: "model"` gets each decision with a note for the model in `extra.model_note`:
 * what repeated, since when, what to do instead (worded once, by the worker's core,
 * `streams/core/model_notes.py`, so every gateway shows the model the same words). The host
 * attaches a warning's note to the next tool result the model sees; a block's or an abort's
 * note is the refusal text.
 */
import type { Decision } from './types';

/** The key of the note in a decision's `extra` (Python's `streams.core.model_notes.MODEL_NOTE`). */
export const MODEL_NOTE = 'model_note';

/** What the model should be told about `decision`; '' when its agent's warnings go to the log only. */
export function modelNote(decision: Pick<Decision, 'extra'> | undefined): string {
  const note = decision?.extra?.[MODEL_NOTE];
  return typeof note === 'string' ? note : '';
}

/** The notes of several decisions (a verdict's warnings), one paragraph each; '' when none. */
export function modelNotes(decisions: ReadonlyArray<Pick<Decision, 'extra'>>): string {
  return decisions.map(modelNote).filter(Boolean).join('\n\n');
}
