DROP INDEX events_subject_id_idx;
