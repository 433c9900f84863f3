"""The fields of a stored result that pages filter and sort by, as SQL expressions over its JSON.

The store indexes each expression (`INDEX_DDL`), and the viewer's queries use the same text:
SQLite uses an expression index only where a query spells the expression the same way. A
database written before these indexes existed is still read, by scanning.
"""

HANDLER = "json_extract(result_json, '$.handler')"
GROUP = "json_extract(result_json, '$.group_id')"
TASK = (
    "COALESCE(json_extract(result_json, '$.metadata.task_id'), "
    "json_extract(result_json, '$.group_id'))"
)
"""The task a rollout is a sample of: its request's `metadata.task_id` when the trainer set one,
else its group (a group is n samples of one task)."""
OUTCOME = "json_extract(result_json, '$.outcome')"
REWARD = "json_extract(result_json, '$.reward')"
POLICY_VERSION = "json_extract(result_json, '$.segments[0].policy_version')"
"""The policy version its first sampled turn came from (null where nothing was sampled)."""

INDEX_DDL = f"""
CREATE INDEX IF NOT EXISTS results_by_handler ON results ({HANDLER}, {REWARD});
CREATE INDEX IF NOT EXISTS results_by_group ON results ({GROUP});
CREATE INDEX IF NOT EXISTS results_by_task ON results ({TASK}, {REWARD});
CREATE INDEX IF NOT EXISTS results_by_outcome ON results ({OUTCOME});
CREATE INDEX IF NOT EXISTS results_by_reward ON results ({REWARD});
CREATE INDEX IF NOT EXISTS results_by_policy_version ON results ({POLICY_VERSION});
"""
"""Each index ends, implicitly, with the row's `cursor` (its rowid): a filter on one field
pages newest-first through its index alone."""
