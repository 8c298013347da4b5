-- 0004_history_writer: the term of the replica that records the history
-- (its policy leadership's etcd election revision). An append carries its
-- writer's term and is refused when a later term has written: a deposed
-- leader that still records (etcd unreachable) cannot write after its
-- successor.
CREATE TABLE history_writer (
    id   boolean PRIMARY KEY DEFAULT true CHECK (id),
    term bigint  NOT NULL CHECK (term >= 0)
);
