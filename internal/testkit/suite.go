package testkit

import (
	"testing"
)

func Run(t *testing.T, h Harness) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a database (PostgreSQL, or MariaDB for mysqlinbox); run without -short")
	}
	conn := h.Open(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, conn)
		})
	}
}

func RunCases(t *testing.T, h Harness, names ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a database (PostgreSQL, or MariaDB for mysqlinbox); run without -short")
	}
	known := map[string]func(t *testing.T, conn Conn){}
	for _, c := range cases {
		known[c.name] = c.run
	}
	for _, name := range names {
		if known[name] == nil {
			t.Fatalf("the suite has no case %q", name)
		}
	}
	conn := h.Open(t)
	for _, name := range names {
		run := known[name]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run(t, conn)
		})
	}
}

// cases are the suite's cases, named as the sentences they prove.
var cases = []struct {
	name string
	run  func(t *testing.T, conn Conn)
}{
	{"TransactionModeAppliesAMessageOnceAndSkipsItsDuplicate", appliesOnceAndSkipsTheDuplicate},
	{"AHandlerErrorRollsBackTheEffectAndTheClaim", aHandlerErrorRollsBack},
	{"AHandlerPanicRollsBackTheEffectAndTheClaim", aHandlerPanicRollsBack},
	{"RacingCopiesApplyOnce", racingCopiesApplyOnce},
	{"TheEffectAndTheRowCommitWhenTheMiddlewareReturns", theEffectAndTheRowCommitWhenTheMiddlewareReturns},
	{"ACancelledMessageContextRollsBackAndNacks", aCancelledMessageContextRollsBackAndNacks},
	{"UnderTheRouterEachHandlerOfATopicAppliesAMessageOnceUnderItsOwnName", underTheRouterEachHandlerAppliesAMessageOnceUnderItsOwnName},
	{"AFixedConsumerNameOverridesTheHandlersName", aFixedConsumerNameOverridesTheHandlersName},
	{"WithoutARouterOrAConsumerNameTheInboxRefusesToRun", withoutARouterOrAConsumerNameTheInboxRefusesToRun},
	{"UnderTheRouterAMessageIsAckedOnlyAfterItsCommit", underTheRouterAMessageIsAckedOnlyAfterItsCommit},
	{"UnderTheRouterAPanickingHandlerIsNackedAndItsRedeliveryApplied", underTheRouterAPanickingHandlerIsNackedAndItsRedeliveryApplied},
	{"UnderTheRouterADeadLetterCarriesWatermillsPoisonQueueMetadata", underTheRouterADeadLetterCarriesWatermillsPoisonQueueMetadata},
	{"ProducedMessagesOfAPublishThatFailedAfterTheCommitGoOutWithTheRedelivery", producedMessagesOfAPublishThatFailedAfterTheCommitGoOutWithTheRedelivery},
	{"AFailedCommitIsNackedAppliesNothingAndIsReported", aFailedCommitIsNackedAppliesNothingAndIsReported},
	{"BatchModeNacksOnlyTheFailingMessagesAndAppliesTheOthersOnce", batchMode},
	{"InBatchModeAHandlerThatWorksLongBeforeItWritesHoldsUpOnlyItsOwnBatch", batchSlowHandler},
	{"ABatchWhoseHandlersWorkOnItsConnectionKeepsTheTurnUntilTheyReturn", batchKeepsItsTurn},
	{"InBatchModeStragglersAmongManyMessagesInFlightLoseAndDuplicateNothing", batchStragglersUnderLoad},
	{"InBatchModeCopiesOfAppliedMessagesReturnTheirProducedMessagesWithoutRunning", batchCopies},
	{"InBatchModeAHandlerThatSwallowsAFailedStatementCostsOnlyItsOwnMessage", batchSwallowedFailure},
	{"InBatchModeAHandlerCannotCommitOrRollBackTheBatch", batchHandlerEndsTheTx},
	{"InBatchModeAGoroutineThatOutlivesItsHandlerCannotWriteIntoTheBatch", batchGoroutineOutlivesHandler},
	{"ACopyThatWouldTakeOverAnotherMessagesRowIsAReusedEventID", aTakeoverChecksTheFingerprint},
	{"ASchemaChangeThatARunningFleetMeetsHoldsUpNoneOfItsClaims", aRolloutStallsNoClaim},
	{"AHandlerThatLeavesARowUnscannedAndProducesMessagesIsAppliedOnceOrDeadLetteredWithTheReason", unscannedRowThenProduced},
	{"AStatementPreparedOnTheApplicationsPoolWorksInTransactionModeAndIsDeadLetteredOnceInBatchMode", stmtOfTheApplicationsPool},
	{"AHandlerThatCarriesOnAfterTheDatabaseRolledBackItsTransactionAppliesItsEventOnce", aTxEndedUnderTheHandler},
	{"ProducedMessagesAreReplayedWithTheirIdentitiesAndExactBytesInTransactionMode", producedInTransactionMode},
	{"ProducedMessagesAreReplayedWithTheirIdentitiesAndExactBytesInLeaseMode", producedInLeaseMode},
	{"LeaseModeReleasesAFailedAttemptAndRunsTheNextWithTheSameIdempotencyKey", leaseReleasesAndRetries},
	{"LeaseModeDeadLettersAnExhaustedMessageAndAcksLaterCopiesWithoutRunning", leaseExhausted},
	{"LeaseModeTakesOverAnExpiredLeaseAndFencesTheLateHolder", leaseTakeover},
	{"LeaseModeReleasesAFailedAttemptAtOnceAndStoresItsError", leaseModeReleasesAFailedAttemptAtOnceAndStoresItsError},
	{"LeaseModeStoresALongErrorCutAtACharacterBoundary", leaseModeStoresALongErrorCutAtACharacterBoundary},
	{"LeaseModeReleasesThePanickingHandlersLeaseAndReportsAFailedRelease", leaseModeReleasesThePanickingHandlersLeaseAndReportsAFailedRelease},
	{"LeaseModeKeepsAnExhaustedMessageWithoutADeadLetterTopicAndNacksItSlowly", leaseModeKeepsAnExhaustedMessageWithoutADeadLetterTopicAndNacksItSlowly},
	{"TwoInboxesOfAConsumerNeverHoldALeaseTogether", twoInboxesOfAConsumerNeverHoldALeaseTogether},
	{"ATransactionModeCopyWaitsForALeaseModeHolder", aTransactionModeCopyWaitsForALeaseModeHolder},
	{"TheLeaseKeysOfDifferentMessagesNeverCollide", theLeaseKeysOfDifferentMessagesNeverCollide},
	{"LeaseModeSkipsACopyOfADoneMessageAndAcksIt", leaseModeSkipsACopyOfADoneMessageAndAcksIt},
	{"LeaseModeClaimsByTheDatabaseClockBeforeTheHandlerRuns", leaseModeClaimsByTheDatabaseClockBeforeTheHandlerRuns},
	{"AHandlerCanExtendItsLease", aHandlerCanExtendItsLease},
	{"TheObserverSeesATakeoverBeforeTheNextClaimAndTheLostLeaseOfTheLateHolder", theObserverSeesATakeoverBeforeTheNextClaimAndTheLostLeaseOfTheLateHolder},
	{"LeaseModeNacksACopyWhileTheLeaseIsLiveAfterABoundedDelay", leaseModeNacksACopyWhileTheLeaseIsLiveAfterABoundedDelay},
	{"LeaseModesIdempotencyKeyIsStableAcrossAttemptsAndCopies", leaseModesIdempotencyKeyIsStableAcrossAttemptsAndCopies},
	{"TransactionModeTakesOverARowLeaseModeReleased", modeSwitch},
	{"MigrateRunsTwiceAndConcurrently", migrateTwiceAndConcurrently},
	{"TheFirstMessageCreatesAMissingSchema", autoMigrate},
	{"AMigrationRolledBackAndAppliedAgainUnderARunningInboxKeepsEachMessageUnderItsConsumer", migrationRedoneUnderARunningInbox},
	{"CleanupDeletesExpiredRowsAndKeepsTheOthers", cleanupDeletesExpired},
	{"ASecondCleanupWhileOneRunsIsSkipped", cleanupConcurrentIsSkipped},
	{"ReadStatsCountsEachConsumersRowsByState", readStats},
	{"ForgetRemovesOneRowSoItsNextCopyIsAppliedAgain", forget},
	{"ForgetKeepsALiveLeaseUnlessForced", forgetKeepsALiveLeaseUnlessForced},
	{"RemembersReportsEachConsumer", remembers},
	{"ReplicasRegisteringANewConsumerTogetherUseOneIDForIt", registeringANameDrawsOneID},
	{"ANewConsumerBeyondTheTablesLastConsumerIDIsHeldBackAndTheOthersGoOn", exhaustedConsumerIDsHoldANewConsumerBack},
	{"TheEventIDIsReadWhereTheOptionsSay", theEventIDIsReadWhereTheOptionsSay},
	{"UnusableEventIDsAreDeadLetteredWithTheReasonAndAcked", unusableIDsAreDeadLetteredWithTheReasonAndAcked},
	{"WithoutADeadLetterTopicUnusableEventIDsAreNackedAfterTheRejectDelay", unusableIDsWithoutADeadLetterTopicAreNackedAfterTheRejectDelay},
	{"EveryDuplicateReturnsTheStoredProducedMessages", everyDuplicateReturnsTheStoredProducedMessages},
	{"TheObserverSeesAClaimBracketedByClaimedAndFinishedAndACopyAsADuplicate", aClaimIsBracketedByClaimedAndFinished},
	{"TheObserverSeesAFailingOrPanickingHandlerFinishAsFailedWithoutACommit", aFailingOrPanickingHandlerFinishesAsFailedWithoutACommit},
	{"TheObserverSeesRejectsAsNackedOrDeadLettered", rejectsAreReportedAsNackedOrDeadLettered},
	{"TheObserverSeesAnExhaustedLeaseModeMessageNackedOrDeadLettered", leaseModeReportsAnExhaustedMessageAsNackedOrDeadLettered},
	{"TheObserverSeesEachCleanupBatchWithItsConsumersRows", theObserverSeesEachCleanupBatchWithItsConsumersRows},
	{"AnEventIDReusedForAnotherMessageIsReportedAndSkippedInEveryMode", aReusedIDIsReportedAndSkipped},
	{"AnEventIDReusedForAnotherMessageIsDeadLetteredWhenAskedInEveryMode", aReusedIDIsDeadLetteredWhenAsked},
	{"RowsWrittenWithoutAFingerprintNeverConflict", rowsWithoutAFingerprintNeverConflict},
	{"RacingMessagesUnderOneEventIDApplyOneAndReportTheOthers", racingReusesApplyOnce},
}
