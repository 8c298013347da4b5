-- 0005_events_subject_id: a subject's last state change by id, read by
-- every append of the history writer (events.Store.AppendAs).
CREATE INDEX events_subject_id_idx ON events (subject_kind, subject, id);
