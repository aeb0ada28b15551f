"""The flash sale, simulated: the fleet over time, from measured inputs and infra/'s own scale rules.

One module per concept:
- `infra`: the scale rules and limits, read from infra/ and host.json;
- `inputs`: what a request costs (measured.json, from `measure`) and the PROVISIONAL figures, in one place;
- `arrivals`: offered load over time (steady, a step to 3x within a minute, a ramp, a day);
- `replica`: one replica request by request (the host's throttle, the app's admission, the worker's CPU);
- `scaling`: KEDA and Container Apps setting the replica count, replicas taking time to start;
- `fleet`: the three paths (HTTP single, HTTP batch, Service Bus) over a scenario, minute by minute;
- `capacity`: the floor, ceiling and thresholds that hold a p99 target; `report`: tables and plots.

`python -m bench.flashsale run|capacity` (`make capacity`); docs/capacity.md shows the figures.
"""
