"""Reading a task's files into checked rows, without torch: tables and sentence pairs
(`readers`), multiple choice and span QA (`parsing`). The heads parse with these; a study's
driver counts and checks training rows with them without loading the trainer."""
