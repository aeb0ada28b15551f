#!/bin/sh
# azd preprovision: check the sale calendar (SCORING_SALE_CALENDAR, docs/deploy.md "A sale known in
# advance") before anything is provisioned, and print the KEDA cron rules it becomes. A bad window
# (not JSON, a malformed time, start not before end, an unknown time zone, replicas past maxReplicas,
# a window in the past or over 31 days) stops `azd provision` / `azd up` here with one message.
# The checks are infra/hooks/sale_calendar.py's (standard library only: any Python 3.11+).
#
#   SCORING_SALE_CALENDAR='[{"start": "2026-12-11T08:45", "end": "2026-12-11T11:00",
#     "timezone": "Europe/London", "replicas": 30}]' infra/hooks/sale-calendar.sh
set -eu
here="$(dirname "$0")"
exec "${PY:-python3}" "$here/sale_calendar.py"
