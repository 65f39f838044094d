#!/bin/sh
case "$*" in *x-gcoff*) export GOGC=off;; esac
exec /tmp/tidal-bin "$@"
