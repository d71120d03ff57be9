"""Chat model providers that `init_chat_model` does not cover: scripted answers, the embedded llama.cpp model,
and local Hugging Face VLMs."""
