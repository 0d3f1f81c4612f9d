// Package docs holds tenant-worker's documentation: README.md at the root
// of the repository and the pages of this folder. It has no code; its tests
// keep the pages honest against the code and the Makefile: links resolve,
// and every command, flag, test, setting, metric, alert, pause cause,
// rejection reason and package the pages name exists, and the tables of
// settings, metrics, rejection reasons and packages are complete.
package docs
