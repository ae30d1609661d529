"""`webrl serve`: an OpenAI-compatible chat-completions server for local Qwen-VL checkpoints.

    serve_main(ServeConfig(model_path=...))        the CLI entry point (blocks)
    create_app(engine, config)                      the FastAPI app, for any `ChatEngine`
    ServerThread(app).start()                       the app on 127.0.0.1 in a background thread
    LocalChatEngine.from_pretrained(path)           the model behind it (`webrl.chat`; also an in-process judge)
"""
from webrl.serve.app import ServeConfig, ServerThread, create_app, serve_main
from webrl.chat import ChatEngine, ChatMessage, Completion, LocalChatEngine, PreparedPrompt, SamplingParams
from webrl.serve.protocol import RequestError, parse_chat_request

__all__ = ["ServeConfig", "ServerThread", "create_app", "serve_main", "ChatEngine", "ChatMessage",
           "Completion", "LocalChatEngine", "PreparedPrompt", "SamplingParams", "RequestError",
           "parse_chat_request"]
