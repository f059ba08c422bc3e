"""Stage 4, diagnosis: `Event`s and the `Run` in, a ranked `Report` out.

Rule files are read safely (`rule_files`, `rule_schema`, `rule_cost`, `literals`) into `rules.Rule`s; `engine`
indexes the events and matches selections and `condition`s; `templates` fills explanations (`holes` checks
them); `net` / `net_data` is the broad net for failures no rule names; `ranking` orders the diagnoses into a
verdict and a root cause. Rules never see raw text, only events.
"""
