#!/bin/sh
[ "$1" = agent ] && export GOMAXPROCS=1
exec /tmp/tidal-bin "$@"
