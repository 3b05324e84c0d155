"""The run lifecycle between the client API and the store: submit, execute, replay."""
