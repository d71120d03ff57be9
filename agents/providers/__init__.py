"""Model providers: one profile each (`profiles.py`, the registry every module reads), the builder that turns a spec
into a chat model through it (`registry.py`), LangChain's providers (`langchain_api.py`), and Unveil's own: scripted
answers, the embedded SmolLM2 (transformers, llama.cpp) and local Hugging Face VLMs."""
