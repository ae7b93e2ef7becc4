"""The agent service: one tool-calling conversation that searches, reads and answers."""
