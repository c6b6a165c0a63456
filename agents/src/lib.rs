//! Orkeon agents: the task runner, LLM clients and prompts.
