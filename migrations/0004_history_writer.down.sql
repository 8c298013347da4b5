DROP TABLE history_writer;
