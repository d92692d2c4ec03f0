"""The dashboard's view model: a frame (and the screen's modes) in, every pane's rows and lines out. Pure: nothing
here imports Textual (import-linter's contract), so unit tests read it without an app."""
