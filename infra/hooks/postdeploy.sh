#!/bin/sh
# azd postdeploy, in this order (docs/deploy.md, "A. azd up"):
#   1. re-assert the KEDA rules (a deploy rewrites the app);
#   2. publish the seed model into the models container (the app reads models only from there);
#   3. the smoke test: a replica ready, then POST /api/score answers;
#   4. subscribe the blob trigger to BlobCreated (its webhook key exists once the real image runs,
#      and a ready replica shows it does).
# tests/test_deploy_hooks.py replays this sequence against Azurite and a served app.
set -eu
here="$(dirname "$0")"
"$here/keda-scale-rules.sh"
"$here/publish-seed-model.sh"
"$here/smoke.sh"
"$here/eventgrid-subscription.sh"
