# azd hook on Windows (azure.yaml `windows:` blocks): the hooks are POSIX sh scripts, and a
# provision or deploy without them leaves the app on the platform's generated scale rules
# (no allowScalingRuleOverride) and the blob trigger without its Event Grid subscription.
# So the run stops here, loudly, instead of finishing without them.
Write-Error ("azd hook: the scale-rule and Event Grid hooks are POSIX sh " +
  "(infra/hooks/*.sh). Run azd from WSL or Git Bash, or run infra/hooks/postdeploy.sh there " +
  "after this provision (docs/deploy.md).")
exit 1
