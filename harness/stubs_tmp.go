package main

import "context"

func zombieCommand(ctx context.Context, args []string) error     { return nil }
func dbFaultsCommand(ctx context.Context, args []string) error   { return nil }
func throughputCommand(ctx context.Context, args []string) error { return nil }
