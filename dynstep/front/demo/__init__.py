"""The bundled demo: a small GPT-style model and the `dynstep demo` run."""
