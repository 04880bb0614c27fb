{{/* Names, labels, images and the config file, shared by every template. */}}

{{- define "toolgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "toolgate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "toolgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "toolgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Pod selector of one component (gateway, worker-fast, worker-sandbox). Call with (list . "gateway"). */}}
{{- define "toolgate.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "toolgate.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "toolgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "toolgate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "toolgate.secretName" -}}
{{- default (include "toolgate.fullname" .) .Values.secret.existingSecret -}}
{{- end -}}

{{/* registry + repository:tag. Call with (list . .Values.gateway.image). */}}
{{- define "toolgate.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 -}}
{{- printf "%s%s:%s" $root.Values.image.registry $image.repository (default $root.Values.image.tag $image.tag | toString) -}}
{{- end -}}

{{/*
The Redis part of the config: exactly one of url, sentinel, cluster, or shards (checked here, so
a bad values file fails at render time with the field named).
*/}}
{{- define "toolgate.redisConfig" -}}
{{- $r := .Values.redis -}}
{{- if $r.shards -}}
{{- include "toolgate.redisShardsConfig" . -}}
{{- else -}}
{{- include "toolgate.checkClientShards" (list . (list)) -}}
{{- $modes := list -}}
{{- if $r.url }}{{ $modes = append $modes "redis.url" }}{{ end -}}
{{- if $r.sentinel }}{{ $modes = append $modes "redis.sentinel" }}{{ end -}}
{{- if $r.cluster }}{{ $modes = append $modes "redis.cluster" }}{{ end -}}
{{- if gt (len $modes) 1 -}}
{{- fail (printf "toolgate: set only one of redis.url, redis.sentinel, redis.cluster (got %s)" (join " and " $modes)) -}}
{{- end -}}
{{- $out := dict "prefix" $r.prefix -}}
{{- if $r.sentinel -}}
{{- if not (and $r.sentinel.name $r.sentinel.nodes) -}}
{{- fail "toolgate: redis.sentinel needs name (the master's name) and nodes (host:port of each sentinel)" -}}
{{- end -}}
{{- $_ := set $out "sentinel" $r.sentinel -}}
{{- else if $r.cluster -}}
{{- if not $r.cluster.nodes -}}
{{- fail "toolgate: redis.cluster needs nodes (host:port of one or more cluster nodes)" -}}
{{- end -}}
{{- $_ := set $out "cluster" $r.cluster -}}
{{- else -}}
{{- $_ := set $out "url" (default "redis://redis:6379" $r.url) -}}
{{- end -}}
{{- if $r.tls }}{{ $_ := set $out "tls" $r.tls }}{{ end -}}
{{- toYaml $out -}}
{{- end -}}
{{- end -}}

{{/*
redis.shards: each entry goes to the config as it is, after the checks toolgate's loader would
make at pod start (docs/sharding.md), so a bad list fails the render instead of every pod.
*/}}
{{- define "toolgate.redisShardsConfig" -}}
{{- $r := .Values.redis -}}
{{- range $field := list "url" "sentinel" "cluster" "tls" -}}
{{- if index $r $field -}}
{{- fail (printf "toolgate: set either redis.shards or redis.%s, not both: each shard says where its Redis is (and its own tls)" $field) -}}
{{- end -}}
{{- end -}}
{{- $ids := list -}}
{{- $homes := list -}}
{{- range $i, $shard := $r.shards -}}
{{- $at := printf "redis.shards[%d] (%s)" $i $shard.id -}}
{{- if has $shard.id $ids -}}
{{- fail (printf "toolgate: %s: duplicate shard id %q" $at $shard.id) -}}
{{- end -}}
{{- $ids = append $ids $shard.id -}}
{{- if $shard.home }}{{ $homes = append $homes $shard.id }}{{ end -}}
{{- $targets := list -}}
{{- range $field := list "url" "sentinel" "cluster" -}}
{{- if index $shard $field }}{{ $targets = append $targets $field }}{{ end -}}
{{- end -}}
{{- if ne (len $targets) 1 -}}
{{- fail (printf "toolgate: %s needs exactly one of url, sentinel, cluster (got %s)" $at (default "none" (join " and " $targets))) -}}
{{- end -}}
{{- if and $shard.sentinel (not (and $shard.sentinel.name $shard.sentinel.nodes)) -}}
{{- fail (printf "toolgate: %s: sentinel needs name (the master's name) and nodes (host:port of each sentinel)" $at) -}}
{{- end -}}
{{- if and $shard.cluster (not $shard.cluster.nodes) -}}
{{- fail (printf "toolgate: %s: cluster needs nodes (host:port of one or more cluster nodes)" $at) -}}
{{- end -}}
{{- end -}}
{{- if gt (len $homes) 1 -}}
{{- fail (printf "toolgate: only one of redis.shards is home (got %s)" (join " and " $homes)) -}}
{{- end -}}
{{- include "toolgate.checkClientShards" (list . $ids) -}}
{{- toYaml (dict "prefix" $r.prefix "shards" $r.shards) -}}
{{- end -}}

{{/* A client's `shard` names one of redis.shards. Call with (list . <shard ids>). */}}
{{- define "toolgate.checkClientShards" -}}
{{- $root := index . 0 -}}
{{- $ids := index . 1 -}}
{{- range $root.Values.clients -}}
{{- if and .shard (not (has .shard $ids)) -}}
{{- if $ids -}}
{{- fail (printf "toolgate: client %q names shard %q, which redis.shards does not have (%s)" .id .shard (join ", " $ids)) -}}
{{- else if ne .shard "home" -}}
{{- fail (printf "toolgate: client %q names shard %q, but redis.shards is not set" .id .shard) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The toolgate config file (TOOLGATE_CONFIG) the gateway and both worker pools read. */}}
{{- define "toolgate.configFile" -}}
{{- $cfg := deepCopy (default (dict) .Values.config) -}}
{{- $chart := dict
  "server" (dict "port" (int .Values.gateway.port) "metricsPort" (int .Values.gateway.metricsPort))
  "redis" (include "toolgate.redisConfig" . | fromYaml)
  "clients" .Values.clients
  "worker" (dict "metricsPort" (int .Values.workers.metricsPort))
  "log" (dict "level" .Values.logLevel)
-}}
{{- $sandbox := dict "driver" .Values.workers.sandbox.driver -}}
{{- if eq .Values.workers.sandbox.driver "docker" -}}
{{- /* Host paths: the node's engine resolves bind mounts on the node (docs/kubernetes.md). */ -}}
{{- $_ := set $sandbox "workspacesRoot" (printf "%s/workspaces" .Values.workers.sandbox.docker.dataDir) -}}
{{- $_ := set $sandbox "stateDir" (printf "%s/sandbox" .Values.workers.sandbox.docker.dataDir) -}}
{{- $_ := set $sandbox "docker" (dict "socketPath" .Values.workers.sandbox.docker.socketPath) -}}
{{- else -}}
{{- $_ := set $sandbox "workspacesRoot" (printf "%s/workspaces" .Values.workers.sandbox.dataDir) -}}
{{- $_ := set $sandbox "stateDir" (printf "%s/sandbox" .Values.workers.sandbox.dataDir) -}}
{{- end -}}
{{- $_ := set $chart "sandbox" $sandbox -}}
{{- toYaml (mustMergeOverwrite $cfg $chart) -}}
{{- end -}}

{{/*
The workers' config file (worker.yaml): the same, but no client's key. A worker authenticates
nobody (it needs the clients' ids, scopes and limits only), so a client given as `key: ${VAR}`
is listed with a digest no key has (64 zeros: finding a key that hashes to it is a SHA-256
preimage) and its variable is not set in the worker pods at all (toolgate.workerEnv).
*/}}
{{- define "toolgate.workerConfigFile" -}}
{{- $cfg := include "toolgate.configFile" . | fromYaml -}}
{{- $clients := list -}}
{{- range $cfg.clients -}}
{{- $client := omit . "key" -}}
{{- if hasKey . "key" }}{{ $_ := set $client "keySha256" (repeat 64 "0") }}{{ end -}}
{{- $clients = append $clients $client -}}
{{- end -}}
{{- $_ := set $cfg "clients" $clients -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Names of the env vars the clients' keys come from (`key: ${VAR}`): the gateway's only. */}}
{{- define "toolgate.clientKeyVars" -}}
{{- $vars := list -}}
{{- range .Values.clients -}}
{{- if .key -}}
{{- range regexFindAll "\\$\\{[A-Za-z_][A-Za-z0-9_]*" (toString .key) -1 -}}
{{- $vars = append $vars (trimPrefix "${" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $vars -}}
{{- end -}}

{{/*
Env of a toolgate container: the config file, the Secret's keys, extra env. Call with
(list . "gateway") or (list . "worker"): workers get worker.yaml and none of the client keys
(the Secret's other entries, such as Redis passwords, they get).
*/}}
{{- define "toolgate.env" -}}
{{- $root := index . 0 -}}
{{- $worker := eq (index . 1) "worker" -}}
{{- $skip := list -}}
{{- if $worker }}{{ $skip = include "toolgate.clientKeyVars" $root | fromJsonArray }}{{ end -}}
- name: TOOLGATE_CONFIG
  value: /etc/toolgate/{{ ternary "worker.yaml" "toolgate.yaml" $worker }}
{{- range $name, $key := $root.Values.secretEnv }}
{{- if not (has $name $skip) }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "toolgate.secretName" $root }}
      key: {{ $key }}
{{- end }}
{{- end }}
{{- with $root.Values.env }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Where workers send code mode's nested calls (TOOLGATE_CODE_MODE_GATEWAY_URL): codeMode.gatewayUrl,
else config.codeMode.gatewayUrl, else this release's gateway Service. The config's own default
(127.0.0.1) is never right in a worker pod: no gateway listens there.
*/}}
{{- define "toolgate.codeModeGatewayUrl" -}}
{{- $fromConfig := dig "codeMode" "gatewayUrl" "" (default (dict) .Values.config) -}}
{{- $service := printf "http://%s-gateway.%s.svc:%d" (include "toolgate.fullname" .) .Release.Namespace (int .Values.gateway.service.port) -}}
{{- coalesce .Values.codeMode.gatewayUrl $fromConfig $service -}}
{{- end -}}

{{/* Pod annotations that roll the pods when the config or the chart's Secret changes. */}}
{{- define "toolgate.checksums" -}}
checksum/config: {{ include "toolgate.configFile" . | sha256sum }}
{{- if not .Values.secret.existingSecret }}
checksum/secret: {{ toYaml .Values.secret.values | sha256sum }}
{{- end }}
{{- end -}}

{{/* The PromQL behind a worker pool's ScaledObject: calls waiting or running in its queue. */}}
{{- define "toolgate.queueQuery" -}}
{{- $root := index . 0 -}}
{{- $queue := index . 1 -}}
{{- $selector := $root.Values.keda.prometheus.selector -}}
{{- if not $selector -}}
{{- $selector = printf "namespace=%q,job=%q" $root.Release.Namespace (printf "%s-gateway" (include "toolgate.fullname" $root)) -}}
{{- end -}}
{{- /* Every gateway reports the same Redis counts: max across gateways, never sum. */ -}}
{{- if $root.Values.redis.shards -}}
{{- /* Sharded: workers serve every shard, so the pool's work is the sum over shards. */ -}}
sum(max by (shard, state) (toolgate_queue_jobs{ {{- $selector }},queue="{{ $queue }}",state=~"waiting|active"}))
{{- else -}}
sum(max by (state) (toolgate_queue_jobs{ {{- $selector }},queue="{{ $queue }}",state=~"waiting|active"}))
{{- end -}}
{{- end -}}

{{/* NetworkPolicy egress every toolgate pod needs: DNS, and Redis on redis.ports. */}}
{{- define "toolgate.baseEgress" -}}
- to:
    {{- toYaml .Values.networkPolicy.dns.to | nindent 4 }}
  ports:
    - { protocol: UDP, port: 53 }
    - { protocol: TCP, port: 53 }
- ports:
    {{- range .Values.redis.ports }}
    - { protocol: TCP, port: {{ . }} }
    {{- end }}
  {{- with .Values.networkPolicy.redis.to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
