// Vocabulary loading (placeholder until the tokenizer lands).
