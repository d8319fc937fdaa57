"""The lesson's batching schemes (../shared/spec/lesson.txt): `static` (a batch forms, runs to completion, then
the next) and `continuous` (iteration-level, prompts whole). They keep vLLM's shared knobs and defaults."""
