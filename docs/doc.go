// Package docs holds vpccni's documentation, the Markdown files beside
// this one. It has no code: its test (go test ./docs/) checks that every
// relative link of README.md and docs/*.md resolves (file and #anchor),
// that every docs/ path cited in the repository's comments exists, and
// that every command README.md shows in a fenced sh block names a real
// make target, a real replay subcommand and files that exist.
package docs
