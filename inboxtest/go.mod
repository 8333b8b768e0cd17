module github.com/effectively-once/watermill-inbox/inboxtest

go 1.24

require (
	github.com/ThreeDotsLabs/watermill v1.5.1
	github.com/effectively-once/watermill-inbox v0.1.0
	github.com/lib/pq v1.12.3
)

require (
	github.com/ThreeDotsLabs/watermill-sql/v3 v3.1.0 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/sony/gobreaker v1.0.0 // indirect
)
