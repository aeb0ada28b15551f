#!/bin/sh
# azd postdeploy: re-assert the KEDA rules (a deploy rewrites the app), then subscribe the
# blob trigger to BlobCreated (its webhook key exists only once the real image runs).
set -eu
here="$(dirname "$0")"
"$here/keda-scale-rules.sh"
"$here/eventgrid-subscription.sh"
